package jetstream_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

func newCA(tb testing.TB, dir, name string) *testCA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(tb, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a server certificate for 127.0.0.1 and localhost signed by
// ca, and returns the certificate and key files.
func (ca *testCA) issue(tb testing.TB, dir string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "nats-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// syncBuffer is a log sink safe for the transport's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// roundTrip publishes one message through tr and receives it.
func roundTrip(t *testing.T, tr *jetstream.Transport) {
	t.Helper()
	ctx := context.Background()
	topic := uniq(t, "auth")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "e1", Topic: topic, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message().ID != "e1" {
		t.Errorf("received %q", d.Message().ID)
	}
	_ = d.Ack(ctx)
}

// TestTLSAndAuth: against a private nats-server that requires TLS (a CA
// and certificate made by the test) and a user: the right CA with the
// right password, or an NKey, connects and carries messages; a wrong CA,
// no TLS, a wrong password or an unknown NKey fail with a clear error
// (ErrAuth for credentials) that repeats no credential, and nothing the
// transport logged repeats one either.
func TestTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "ferry-test-ca")
	other := newCA(t, dir, "other-ca")
	certFile, keyFile := ca.issue(t, dir)
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	strangerFile := filepath.Join(dir, "stranger.nk")
	if err := os.WriteFile(strangerFile, strangerSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	const password = "s3cret-Pass-9"
	srv := testbrokers.StartNATS(t, fmt.Sprintf(`
tls {
  cert_file: %q
  key_file: %q
  timeout: 2
}
authorization {
  users = [
    {user: "shop", password: %q}
    {nkey: %q}
  ]
}
`, certFile, keyFile, password, pub))
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	base := "nats://shop:" + password + "@" + srv.Addr()

	t.Run("RightCAAndPassword", func(t *testing.T) {
		tr, err := jetstream.New(ctx, base+"?tls_ca="+ca.file, jetstream.WithLogger(logger))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer tr.Close(ctx)
		roundTrip(t, tr)
	})
	t.Run("NKey", func(t *testing.T) {
		tr, err := jetstream.New(ctx, "nats://"+srv.Addr()+"?tls_ca="+ca.file+"&nkey_seed_file="+seedFile, jetstream.WithLogger(logger))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer tr.Close(ctx)
		roundTrip(t, tr)
		tr2, err := jetstream.New(ctx, "nats://"+srv.Addr()+"?tls_ca="+ca.file, jetstream.NKeySeed(seed), jetstream.WithLogger(logger))
		if err != nil {
			t.Fatalf("New with NKeySeed: %v", err)
		}
		_ = tr2.Close(ctx)
	})
	bad := []struct {
		name string
		url  string
		auth bool
	}{
		{"WrongCA", base + "?tls_ca=" + other.file, false},
		{"NoCA", base + "?allow_plaintext_auth=true", false}, // the server requires TLS: nats.go upgrades, with the system roots
		{"WrongPassword", "nats://shop:wrong-" + password + "@" + srv.Addr() + "?tls_ca=" + ca.file, true},
		{"UnknownNKey", "nats://" + srv.Addr() + "?tls_ca=" + ca.file + "&nkey_seed_file=" + strangerFile, true},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := jetstream.New(cctx, b.url, jetstream.WithLogger(logger))
			if err == nil {
				t.Fatal("New connected")
			}
			if b.auth != errors.Is(err, jetstream.ErrAuth) {
				t.Errorf("errors.Is(err, ErrAuth) = %v, want %v: %v", !b.auth, b.auth, err)
			}
			if b.name == "WrongCA" && !strings.Contains(err.Error(), "certificate") {
				t.Errorf("a wrong CA's error does not say so: %v", err)
			}
			for _, secret := range []string{password, string(seed), string(strangerSeed)} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error repeats a credential: %v", err)
				}
			}
			t.Logf("%s: %v", b.name, err)
		})
	}
	for _, secret := range []string{password, string(seed), string(strangerSeed)} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the transport logged a credential:\n%s", logs.String())
		}
	}
}

// TestToken: a server that requires a token accepts nats://<token>@host
// (and the Token option), and refuses a wrong one with ErrAuth, without
// repeating it.
func TestToken(t *testing.T) {
	const token = "t0ken-Secret-77"
	srv := testbrokers.StartNATS(t, fmt.Sprintf("authorization { token: %q }\n", token))
	ctx := context.Background()
	tr, err := jetstream.New(ctx, "nats://"+token+"@"+srv.Addr()+"?allow_plaintext_auth=true")
	if err != nil {
		t.Fatalf("New with the token: %v", err)
	}
	defer tr.Close(ctx)
	roundTrip(t, tr)
	tr2, err := jetstream.New(ctx, "nats://"+srv.Addr(), jetstream.Token(token), jetstream.AllowPlaintextAuth(true))
	if err != nil {
		t.Fatalf("New with Token: %v", err)
	}
	_ = tr2.Close(ctx)
	_, err = jetstream.New(ctx, "nats://wrong-"+token+"@"+srv.Addr()+"?allow_plaintext_auth=true")
	if !errors.Is(err, jetstream.ErrAuth) || strings.Contains(err.Error(), token) {
		t.Errorf("a wrong token: %v; want ErrAuth without the token", err)
	}
}

// TestPlaintextAuth: a password or token without TLS is refused before
// any connection, with an error wrapping ErrInvalidOption that names
// allow_plaintext_auth and repeats no credential, unless the URL (or
// AllowPlaintextAuth) opts in; an NKey needs no opt-in (only a signature
// crosses the network), and TLS needs none.
func TestPlaintextAuth(t *testing.T) {
	ctx := context.Background()
	const secret = "pl41n-S3cret"
	refused := []struct {
		name string
		url  string
		opts []jetstream.Option
	}{
		{"UserPassword", "nats://shop:" + secret + "@127.0.0.1:1", nil},
		{"Token", "nats://" + secret + "@127.0.0.1:1", nil},
		{"TokenOption", "nats://127.0.0.1:1", []jetstream.Option{jetstream.Token(secret)}},
		{"UserPasswordOption", "nats://127.0.0.1:1", []jetstream.Option{jetstream.UserPassword("shop", secret)}},
		{"OptedOut", "nats://shop:" + secret + "@127.0.0.1:1?allow_plaintext_auth=false", nil},
		{"OptionOverridesURL", "nats://shop:" + secret + "@127.0.0.1:1?allow_plaintext_auth=true", []jetstream.Option{jetstream.AllowPlaintextAuth(false)}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, err := jetstream.New(ctx, c.url, c.opts...)
			if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "allow_plaintext_auth") {
				t.Fatalf("New: %v; want ErrInvalidOption naming allow_plaintext_auth", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error repeats the credential: %v", err)
			}
		})
	}
	// Opted in, with TLS, or with an NKey, the URL is accepted and New
	// goes on to dial (port 1 refuses the connection): not ErrInvalidOption.
	seed, _ := func() ([]byte, error) { kp, _ := nkeys.CreateUser(); return kp.Seed() }()
	accepted := []struct {
		name string
		url  string
		opts []jetstream.Option
	}{
		{"OptIn", "nats://shop:" + secret + "@127.0.0.1:1?allow_plaintext_auth=true", nil},
		{"OptInToken", "nats://" + secret + "@127.0.0.1:1?allow_plaintext_auth=1", nil},
		{"OptInOption", "nats://shop:" + secret + "@127.0.0.1:1", []jetstream.Option{jetstream.AllowPlaintextAuth(true)}},
		{"TLS", "nats://shop:" + secret + "@127.0.0.1:1?tls=true", nil},
		{"NKey", "nats://127.0.0.1:1", []jetstream.Option{jetstream.NKeySeed(seed)}},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := jetstream.New(cctx, c.url, c.opts...)
			if err == nil || errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("New: %v; want a connection error", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error repeats the credential: %v", err)
			}
		})
	}
}
