package kafka_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testcerts"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// Users of the private TLS and SASL cluster.
const (
	tlsPlainUser, tlsPlainPass   = "alice", "plain-Pa55-4e1d"
	tlsScramUser, tlsScramPass   = "bob", "scram-Pa55-9c2b"
	tlsScram5User, tlsScram5Pass = "carol", "scram512-Pa55-77f0"
)

// tlsCluster is a private kfake cluster that speaks only TLS, with a
// certificate its CA (ca, a file) issued, and requires SASL: PLAIN for
// alice, SCRAM-SHA-256 for bob, SCRAM-SHA-512 for carol. other is a second
// CA that did not issue it.
func tlsCluster(t *testing.T) (addr string, ca, other *testcerts.CA) {
	t.Helper()
	dir := t.TempDir()
	ca, other = testcerts.NewCA(t, dir, "ca"), testcerts.NewCA(t, dir, "other")
	certFile, keyFile := ca.Server(t, dir, "broker")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	addrs := newCluster(t, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", tlsPlainUser, tlsPlainPass),
		kfake.Superuser("SCRAM-SHA-256", tlsScramUser, tlsScramPass),
		kfake.Superuser("SCRAM-SHA-512", tlsScram5User, tlsScram5Pass))
	return addrs[0], ca, other
}

// TestTLSAndSASL (issue 17): against a private cluster with TLS and SASL,
// the right CA (tls_ca in the URL, or the TLS option) connects with each
// mechanism and a message goes round; a CA that did not issue the broker's
// certificate fails with an error about TLS naming the broker; a wrong
// password or user fails with an error wrapping kafka.ErrAuth that names
// the broker and never shows the password.
func TestTLSAndSASL(t *testing.T) {
	addr, ca, other := tlsCluster(t)
	base := "session_timeout=1s&heartbeat=100ms&connect_timeout=5s"
	for _, c := range []struct{ mech, user, pass string }{
		{"plain", tlsPlainUser, tlsPlainPass},
		{"scram-sha-256", tlsScramUser, tlsScramPass},
		{"scram-sha-512", tlsScram5User, tlsScram5Pass},
	} {
		t.Run(c.mech, func(t *testing.T) {
			u := fmt.Sprintf("kafka://%s:%s@%s?sasl=%s&tls_ca=%s&%s", c.user, url.QueryEscape(c.pass), addr, c.mech, url.QueryEscape(ca.File), base)
			tr, err := kafka.New(ctxT(t, 10*time.Second), u)
			if err != nil {
				t.Fatalf("New with the right CA and password: %v", err)
			}
			t.Cleanup(func() { _ = tr.Close(context.Background()) })
			topic := "tls-" + c.user
			st := subscribe(t, tr, transport.Subscription{Topic: topic, Group: "g-" + c.user, StartAtOldest: true})
			publishAll(t, tr, []*handler.Message{{ID: "over-tls", Key: "k", Topic: topic, Payload: []byte("secret payload")}})
			if m := receive(t, st, 1)[0]; m.ID != "over-tls" || string(m.Payload) != "secret payload" {
				t.Errorf("received %s %q", m.ID, m.Payload)
			}
		})
	}
	t.Run("TLSOption", func(t *testing.T) {
		tr, err := kafka.New(ctxT(t, 10*time.Second), "kafka://"+addr, kafka.TLS(ca.ClientConfig()),
			kafka.SASL(kafka.SASLScramSHA256, tlsScramUser, tlsScramPass))
		if err != nil {
			t.Fatalf("New with TLS(ca) and SASL: %v", err)
		}
		_ = tr.Close(context.Background())
	})
	t.Run("WrongCA", func(t *testing.T) {
		u := fmt.Sprintf("kafka://%s:%s@%s?sasl=plain&tls_ca=%s&%s", tlsPlainUser, tlsPlainPass, addr, url.QueryEscape(other.File), base)
		_, err := kafka.New(ctxT(t, 10*time.Second), u)
		if err == nil {
			t.Fatal("New trusting another CA connected")
		}
		t.Log(err)
		if s := err.Error(); !strings.Contains(s, "TLS") || !strings.Contains(s, addr) || strings.Contains(s, tlsPlainPass) || errors.Is(err, kafka.ErrAuth) {
			t.Errorf("wrong CA: %v; want a TLS error naming %s, not ErrAuth, without the password", err, addr)
		}
	})
	t.Run("SystemRoots", func(t *testing.T) { // tls=true: the system roots do not know the test's CA
		u := fmt.Sprintf("kafka://%s:%s@%s?sasl=plain&tls=true&%s", tlsPlainUser, tlsPlainPass, addr, base)
		if _, err := kafka.New(ctxT(t, 10*time.Second), u); err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("tls=true against a certificate of a private CA: %v; want a TLS error", err)
		}
	})
	for _, c := range []struct{ name, mech, user, pass string }{
		{"WrongPasswordPlain", "plain", tlsPlainUser, "wrong-Pa55-0001"},
		{"WrongPasswordScram", "scram-sha-256", tlsScramUser, "wrong-Pa55-0002"},
		{"WrongUser", "scram-sha-512", "mallory", "wrong-Pa55-0003"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := fmt.Sprintf("kafka://%s:%s@%s?sasl=%s&tls_ca=%s&%s", c.user, c.pass, addr, c.mech, url.QueryEscape(ca.File), base)
			start := time.Now()
			_, err := kafka.New(ctxT(t, 10*time.Second), u)
			if !errors.Is(err, kafka.ErrAuth) || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), c.pass) {
				t.Errorf("%s: %v; want an error wrapping kafka.ErrAuth, naming %s, without the password", c.name, err, addr)
			}
			t.Log(err)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the refusal took %v; want it at once, not at the connect timeout", d)
			}
		})
	}
}

// TestPlaintextAuth (issue 17, item 6): SASL credentials without TLS are
// refused before any connection, from the URL and from the SASL option,
// unless allow_plaintext_auth=true (or AllowPlaintextAuth) opts in; the
// error names the opt-in and never the password.
func TestPlaintextAuth(t *testing.T) {
	addrs := newCluster(t, 1, kfake.EnableSASL(), kfake.Superuser("PLAIN", "alice", "plain-secret-31"))
	ctx := ctxT(t, 10*time.Second)
	for name, open := range map[string]func() (*kafka.Transport, error){
		"URL": func() (*kafka.Transport, error) {
			return kafka.New(ctx, "kafka://alice:plain-secret-31@"+addrs[0])
		},
		"URLScram": func() (*kafka.Transport, error) {
			return kafka.New(ctx, "kafka://alice:plain-secret-31@"+addrs[0]+"?sasl=scram-sha-256&tls=false")
		},
		"Option": func() (*kafka.Transport, error) {
			return kafka.New(ctx, brokerURL(addrs), kafka.SASL(kafka.SASLPlain, "alice", "plain-secret-31"))
		},
		"OptedOut": func() (*kafka.Transport, error) {
			return kafka.New(ctx, "kafka://alice:plain-secret-31@"+addrs[0]+"?allow_plaintext_auth=false")
		},
	} {
		_, err := open()
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "allow_plaintext_auth") || strings.Contains(err.Error(), "plain-secret-31") {
			t.Errorf("%s: %v; want ErrInvalidOption naming allow_plaintext_auth, without the password", name, err)
		}
	}
	for name, u := range map[string]string{
		"URL":    "kafka://alice:plain-secret-31@" + addrs[0] + "?allow_plaintext_auth=true",
		"Option": brokerURL(addrs),
	} {
		tr, err := kafka.New(ctx, u, kafka.SASL(kafka.SASLPlain, "alice", "plain-secret-31"), kafka.AllowPlaintextAuth(true))
		if err != nil {
			t.Errorf("%s: with the opt-in: %v", name, err)
			continue
		}
		_ = tr.Close(context.Background())
	}
}

// TestConnectDeadline (issue 17, item 7): against a listener that accepts
// TCP and never answers, New returns at its connect timeout, not after
// sarama's retries, with an error that names the broker and the steps it
// tried (and wraps context.DeadlineExceeded), from the default, the URL
// key or the option.
func TestConnectDeadline(t *testing.T) {
	silent := fauxqs.Silent(t)
	for name, c := range map[string]struct {
		url  string
		opts []kafka.Option
		want time.Duration
	}{
		"Default":  {url: "kafka://" + silent, want: kafka.DefaultConnectTimeout},
		"URL":      {url: "kafka://" + silent + "?connect_timeout=1s", want: time.Second},
		"TLS+SASL": {url: "kafka://u:p-Secret-1@" + silent + "?tls=true&connect_timeout=1s", want: time.Second},
		"Option":   {url: "kafka://" + silent, opts: []kafka.Option{kafka.ConnectTimeout(time.Second)}, want: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := kafka.New(context.Background(), c.url, c.opts...)
			d := time.Since(start)
			t.Log(err)
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), silent) ||
				!strings.Contains(err.Error(), "metadata request") || strings.Contains(err.Error(), "p-Secret-1") {
				t.Errorf("New against a silent listener: %v; want a deadline error naming %s and the metadata step", err, silent)
			}
			if d < c.want-50*time.Millisecond || d > c.want+2*time.Second {
				t.Errorf("New returned after %v; want about %v", d, c.want)
			}
			if name == "TLS+SASL" && (!strings.Contains(err.Error(), "TLS handshake") || !strings.Contains(err.Error(), "SASL PLAIN")) {
				t.Errorf("the error %q does not name the TLS and SASL steps", err)
			}
		})
	}
}

// TestReadCallsHonourCtx (issue 17, item 7): against a broker that stops
// answering offset requests, Lag and ListDLQ return when their ctx ends,
// with its error, instead of after sarama's 30s deadline per request.
func TestReadCallsHonourCtx(t *testing.T) {
	c := startCluster(t, 1)
	addrs := c.ListenAddrs()
	createTopic(t, addrs, "mute", 1)
	createTopic(t, addrs, "mute.dlq", 1)
	tr := open(t, addrs)
	t.Cleanup(c.Close) // before the transport's Close, which would wait for the held requests
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true // read, never answered
	})
	for name, call := range map[string]func(context.Context) error{
		"Lag": func(ctx context.Context) error {
			_, err := tr.Lag(ctx, transport.Subscription{Topic: "mute", Group: "g"})
			return err
		},
		"ListDLQ": func(ctx context.Context) error {
			_, err := tr.ListDLQ(ctx, "mute.dlq", 0)
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		d := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || d > 2*time.Second {
			t.Errorf("%s against a mute broker: %v after %v; want the ctx's deadline after about 500ms", name, err, d)
		}
	}
}
