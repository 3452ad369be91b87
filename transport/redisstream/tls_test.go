package redisstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testcerts"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// logBuffer is a logger's output, safe for the transport's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tlsRedis is a private redis-server with a plaintext port and a TLS port
// whose certificate a CA made by the test issued, and whose only user is
// the ACL user "shop": the default user is off.
type tlsRedis struct {
	*testbrokers.Redis
	tlsPort   int
	ca, other *testcerts.CA
}

const (
	aclUser     = "shop"
	aclPassword = "acl-Pa55word-7f3a"
)

func startTLSRedis(t *testing.T) *tlsRedis {
	t.Helper()
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, dir, "ca"), testcerts.NewCA(t, dir, "other")
	cert, key := ca.Server(t, dir, "redis")
	port := testbrokers.FreePort(t)
	srv := testbrokers.StartRedis(t,
		"tls-port "+strconv.Itoa(port),
		"tls-cert-file "+cert,
		"tls-key-file "+key,
		"tls-ca-cert-file "+ca.File,
		"tls-auth-clients no",
		"user default off",
		"user "+aclUser+" on >"+aclPassword+" ~* &* +@all",
	)
	return &tlsRedis{Redis: srv, tlsPort: port, ca: ca, other: other}
}

func (r *tlsRedis) tlsAddr() string { return "127.0.0.1:" + strconv.Itoa(r.tlsPort) }

// noSecret fails t if text holds one of the secrets.
func noSecret(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a credential (%q):\n%s", what, s, text)
		}
	}
}

// TestTLSAndACL runs against a private redis-server that speaks TLS with
// a certificate of a CA the test made, and knows one ACL user: the right
// CA and credentials connect and carry messages; another CA, or the
// system's roots, fail on the certificate, naming the TLS handshake and
// the host; wrong or missing credentials give an error wrapping ErrAuth;
// no error and no log line holds a password.
func TestTLSAndACL(t *testing.T) {
	srv := startTLSRedis(t)
	const wrong = "not-the-Pa55word-91c2"
	var logs logBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := "rediss://" + aclUser + ":" + aclPassword + "@" + srv.tlsAddr() + "/0?timeout=2s&" + fast
	newTr := func(url string, opts ...redisstream.Option) (*redisstream.Transport, error) {
		tr, err := redisstream.New(ctx, url, append(opts, redisstream.WithLogger(logs.logger()))...)
		if err != nil {
			noSecret(t, "the error", err.Error(), aclPassword, wrong)
			return nil, err
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr, nil
	}

	t.Run("RightCA", func(t *testing.T) {
		tr, err := newTr(base, redisstream.TLSConfig(srv.ca.ClientConfig()))
		if err != nil {
			t.Fatalf("New with the right CA and credentials: %v", err)
		}
		topic := uniq("tls")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		if err := tr.Publish(ctx, &handler.Message{ID: "m-1", Key: "k", Topic: topic, Payload: []byte("over TLS")}); err != nil {
			t.Fatal(err)
		}
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m := d.Message(); m.ID != "m-1" || string(m.Payload) != "over TLS" {
			t.Errorf("received %q %q", m.ID, m.Payload)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("CAFromURL", func(t *testing.T) {
		// tls_ca in the URL, as on every transport: the right CA connects
		// and answers; another CA fails on the certificate.
		tr, err := newTr(base + "&tls_ca=" + srv.ca.File)
		if err != nil {
			t.Fatalf("New with tls_ca of the right CA: %v", err)
		}
		if err := tr.Publish(ctx, &handler.Message{ID: "m-2", Topic: uniq("tls"), Payload: []byte("x")}); err != nil {
			t.Fatalf("a call over TLS with tls_ca: %v", err)
		}
		if _, err := newTr(base + "&tls_ca=" + srv.other.File); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("New with tls_ca of another CA: %v, want a certificate error", err)
		}
		if _, err := newTr("redis://" + srv.tlsAddr() + "?tls_ca=" + srv.ca.File); !errors.Is(err, transport.ErrInvalidOption) {
			t.Fatalf("tls_ca on redis://: %v, want ErrInvalidOption", err)
		}
	})
	t.Run("SkipVerify", func(t *testing.T) {
		if _, err := newTr(base + "&tls_insecure=true"); err != nil {
			t.Fatalf("New with tls_insecure: %v", err)
		}
	})
	for name, opts := range map[string][]redisstream.Option{
		"WrongCA":     {redisstream.TLSConfig(srv.other.ClientConfig())},
		"SystemRoots": nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newTr(base, opts...)
			if err == nil {
				t.Fatal("connected with a CA that did not issue the server's certificate")
			}
			msg := err.Error()
			if !strings.Contains(msg, "TLS handshake with "+srv.tlsAddr()) || !strings.Contains(msg, "certificate") {
				t.Errorf("error = %v; want the TLS handshake with %s and the certificate named", err, srv.tlsAddr())
			}
			if errors.Is(err, redisstream.ErrAuth) || errors.Is(err, transport.ErrInvalidOption) {
				t.Errorf("error = %v; a certificate failure is neither ErrAuth nor ErrInvalidOption", err)
			}
			t.Log(err)
		})
	}
	for name, url := range map[string]string{
		"WrongPassword":  strings.Replace(base, aclPassword, wrong, 1),
		"UnknownUser":    strings.Replace(base, aclUser+":", "nobody:", 1),
		"NoCredentials":  "rediss://" + srv.tlsAddr() + "/0?timeout=2s",
		"PasswordAlone":  "rediss://" + aclPassword + "@" + srv.tlsAddr() + "/0?timeout=2s", // the default user, which is off
		"WrongInOptions": base,
	} {
		t.Run(name, func(t *testing.T) {
			opts := []redisstream.Option{redisstream.TLSConfig(srv.ca.ClientConfig())}
			if name == "WrongInOptions" {
				opts = append(opts, redisstream.Credentials(aclUser, wrong))
			}
			_, err := newTr(url, opts...)
			if !errors.Is(err, redisstream.ErrAuth) {
				t.Fatalf("New = %v; want ErrAuth", err)
			}
			if !strings.Contains(err.Error(), srv.tlsAddr()) {
				t.Errorf("error = %v; want the host named", err)
			}
			t.Log(err)
		})
	}
	noSecret(t, "the log", logs.String(), aclPassword, wrong)
}

// TestPlaintextAuth: credentials over redis:// (no TLS) are refused at New,
// before any connection, with an error naming allow_plaintext_auth and
// not the credentials; with allow_plaintext_auth=true (or
// AllowPlaintextAuth) they are sent, and Redis's ACL accepts them; URLs
// without credentials need nothing.
func TestPlaintextAuth(t *testing.T) {
	srv := startTLSRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	plain := srv.Addr()
	for name, c := range map[string]struct {
		url  string
		opts []redisstream.Option
	}{
		"UserAndPassword": {"redis://" + aclUser + ":" + aclPassword + "@" + plain + "/0", nil},
		"PasswordAlone":   {"redis://" + aclPassword + "@" + plain + "/0", nil},
		"EmptyUser":       {"redis://:" + aclPassword + "@" + plain + "/0", nil},
		"Credentials":     {"redis://" + plain + "/0", []redisstream.Option{redisstream.Credentials(aclUser, aclPassword)}},
		"OptedOut":        {"redis://" + aclUser + ":" + aclPassword + "@" + plain + "/0?allow_plaintext_auth=false", nil},
		"OptionOverrides": {"redis://" + aclUser + ":" + aclPassword + "@" + plain + "/0?allow_plaintext_auth=true", []redisstream.Option{redisstream.AllowPlaintextAuth(false)}},
	} {
		t.Run("Refused/"+name, func(t *testing.T) {
			_, err := redisstream.New(ctx, c.url, c.opts...)
			if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "allow_plaintext_auth") {
				t.Fatalf("New = %v; want ErrInvalidOption naming allow_plaintext_auth", err)
			}
			noSecret(t, "the error", err.Error(), aclPassword)
			if _, err := transport.Open(ctx, c.url); c.opts == nil && !errors.Is(err, transport.ErrInvalidOption) {
				t.Errorf("transport.Open = %v; want ErrInvalidOption", err)
			}
		})
	}
	for name, c := range map[string]struct {
		url  string
		opts []redisstream.Option
	}{
		"URL":    {"redis://" + aclUser + ":" + aclPassword + "@" + plain + "/0?allow_plaintext_auth=true", nil},
		"Option": {"redis://" + aclUser + ":" + aclPassword + "@" + plain + "/0", []redisstream.Option{redisstream.AllowPlaintextAuth(true)}},
	} {
		t.Run("OptedIn/"+name, func(t *testing.T) {
			tr, err := redisstream.New(ctx, c.url, c.opts...)
			if err != nil {
				t.Fatalf("New with the opt-in: %v", err)
			}
			defer tr.Close(ctx)
			if err := tr.Publish(ctx, &handler.Message{ID: "a", Topic: uniq("plain"), Payload: []byte("x")}); err != nil {
				t.Fatalf("Publish as the ACL user: %v", err)
			}
		})
	}
	t.Run("OptedInWrongPassword", func(t *testing.T) {
		_, err := redisstream.New(ctx, "redis://"+aclUser+":wrong-9d1f@"+plain+"/0?allow_plaintext_auth=true")
		if !errors.Is(err, redisstream.ErrAuth) {
			t.Fatalf("New = %v; want ErrAuth", err)
		}
		noSecret(t, "the error", err.Error(), "wrong-9d1f")
	})
}

// TestConnectDeadlines (issue 17 item 7): New against a server that
// accepts TCP and never answers, and rediss:// against a plaintext Redis
// port, return within the Timeout (a few at most) with an error that says
// which step failed against which host, where they used to wait 10 to 25
// seconds for "context deadline exceeded".
func TestConnectDeadlines(t *testing.T) {
	requireShared(t)
	silent := fauxqs.Silent(t)
	for _, c := range []struct {
		name, url string
		within    time.Duration
		want      []string
	}{
		{"SilentPlain", "redis://" + silent + "?timeout=300ms", 2 * time.Second,
			[]string{"connect to " + silent, "PING: no reply within 300ms"}},
		{"SilentTLS", "rediss://" + silent + "?timeout=300ms", 2 * time.Second,
			[]string{"TLS handshake with " + silent, "tls-port"}},
		// The default Timeout (5s), against the shared Redis's plaintext
		// port: the case of the issue.
		{"TLSToPlaintextPort", "rediss://" + sharedAddr, 8 * time.Second,
			[]string{"TLS handshake with " + sharedAddr, "tls-port"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := redisstream.New(context.Background(), c.url)
			took := time.Since(start)
			if err == nil {
				t.Fatal("New succeeded")
			}
			if took > c.within {
				t.Errorf("New returned after %v; want within %v", took, c.within)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %v; want it to say %q", err, w)
				}
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestSilentServerDeadlines: once connected, a server that stops
// answering (a proxy holding every byte) ends a Publish with an unknown
// outcome and a Receive with an error, each within a few Timeouts,
// naming the host.
func TestSilentServerDeadlines(t *testing.T) {
	requireShared(t)
	topic := uniq("silent")
	cleanupKeys(t, sharedAddr, topic)
	px := startProxy(t, sharedAddr)
	tr := open(t, "redis://"+px.addr()+"?timeout=300ms&block=100ms&claim_interval=50ms")
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	px.stall()
	start := time.Now()
	err = tr.Publish(ctx, &handler.Message{ID: "a", Topic: topic, Payload: []byte("x")})
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Publish returned after %v", took)
	}
	if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), px.addr()) {
		t.Errorf("Publish = %v; want ErrUnknownOutcome naming %s", err, px.addr())
	}
	start = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = st.Receive(rctx)
	if took := time.Since(start); err == nil || errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
		t.Errorf("Receive = %v after %v; want the read's error within a few timeouts", err, took)
	} else if !strings.Contains(err.Error(), px.addr()) {
		t.Errorf("Receive = %v; want the host named", err)
	}
	px.unstall()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	_ = st.Close(cctx)
}
