package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testcerts"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// tlsSecret is the private node's password: it must appear in no error.
const tlsSecret = "tls-s3cret-pw"

// TestTLS runs against a private RabbitMQ node started by the test with a
// TLS listener whose certificate a generated CA signed, and a user
// "ferry" with a password (no guest): the right CA (the TLS option, or the
// URL key tls_ca, on amqps:// and on amqp://) connects, publishes and
// consumes over TLS; another CA fails the handshake; tls_insecure connects without a CA; wrong credentials over TLS give an error wrapping
// ErrAuth; amqp:// with the TLS option connects with TLS; and plaintext
// with the password is refused without allow_plaintext_auth. No error
// names the password.
func TestTLS(t *testing.T) {
	var tlsPort int
	var ca *testcerts.CA
	n := testbrokers.StartRabbitMQ(t, func(dir string, n *testbrokers.RabbitMQ) string {
		ca = testcerts.NewCA(t, dir, "ca")
		cert, key := ca.Server(t, dir, "server")
		tlsPort = testbrokers.FreePort(t)
		n.User, n.Password = "ferry", tlsSecret
		return fmt.Sprintf("listeners.ssl.default = 127.0.0.1:%d\n"+
			"ssl_options.cacertfile = %s\nssl_options.certfile = %s\nssl_options.keyfile = %s\n"+
			"ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n"+
			"default_user = ferry\ndefault_pass = %s\n", tlsPort, ca.File, cert, key, tlsSecret)
	})
	other := testcerts.NewCA(t, t.TempDir(), "other")
	tlsURL := fmt.Sprintf("amqps://ferry:%s@127.0.0.1:%d/?timeout=5s", tlsSecret, tlsPort)
	noSecret := func(t *testing.T, err error) {
		t.Helper()
		if err != nil && strings.Contains(err.Error(), tlsSecret) {
			t.Errorf("error names the password: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("right CA", func(t *testing.T) {
		tr, err := rabbitmq.New(ctx, tlsURL, rabbitmq.TLS(ca.ClientConfig()))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(ctx)
		topic := transporttest.UniqueName(t, "tls")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(ctx)
		if err := tr.Publish(ctx, &handler.Message{ID: "a", Key: "k", Topic: topic, Payload: []byte("over TLS")}); err != nil {
			t.Fatal(err)
		}
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m := d.Message(); m.ID != "a" || string(m.Payload) != "over TLS" {
			t.Errorf("received %q %q", m.ID, m.Payload)
		}
		_ = d.Ack(ctx)
	})
	t.Run("wrong CA", func(t *testing.T) {
		_, err := rabbitmq.New(ctx, tlsURL, rabbitmq.TLS(other.ClientConfig()))
		if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d (TLS)", tlsPort)) {
			t.Errorf("wrong CA: %v; want a certificate error naming the host", err)
		}
		noSecret(t, err)
	})
	t.Run("system roots", func(t *testing.T) {
		_, err := rabbitmq.New(ctx, tlsURL)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("no CA given: %v; want a certificate error", err)
		}
		noSecret(t, err)
	})
	t.Run("tls_insecure", func(t *testing.T) {
		tr, err := rabbitmq.New(ctx, tlsURL+"&tls_insecure=true")
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close(ctx)
	})
	t.Run("wrong password", func(t *testing.T) {
		u := fmt.Sprintf("amqps://ferry:wrong-%s@127.0.0.1:%d/?timeout=5s", tlsSecret, tlsPort)
		_, err := rabbitmq.New(ctx, u, rabbitmq.TLS(ca.ClientConfig()))
		if !errors.Is(err, rabbitmq.ErrAuth) {
			t.Errorf("wrong password: %v; want ErrAuth", err)
		}
		noSecret(t, err)
	})
	t.Run("tls_ca", func(t *testing.T) {
		tr, err := rabbitmq.New(ctx, tlsURL+"&tls_ca="+ca.File)
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close(ctx)
		// On amqp:// the TLS files mean TLS too.
		u := fmt.Sprintf("amqp://ferry:%s@127.0.0.1:%d/?timeout=5s&tls_ca=%s", tlsSecret, tlsPort, ca.File)
		tr, err = rabbitmq.New(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close(ctx)
		_, err = rabbitmq.New(ctx, tlsURL+"&tls_ca="+other.File)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("tls_ca of another CA: %v; want a certificate error", err)
		}
		noSecret(t, err)
	})
	t.Run("tls_insecure", func(t *testing.T) {
		tr, err := rabbitmq.New(ctx, tlsURL+"&tls_insecure=true")
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close(ctx)
	})
	t.Run("amqp with TLS option", func(t *testing.T) {
		u := fmt.Sprintf("amqp://ferry:%s@127.0.0.1:%d/?timeout=5s", tlsSecret, tlsPort)
		tr, err := rabbitmq.New(ctx, u, rabbitmq.TLS(ca.ClientConfig()))
		if err != nil {
			t.Fatal(err)
		}
		_ = tr.Close(ctx)
	})
	t.Run("plaintext", func(t *testing.T) {
		_, err := rabbitmq.New(ctx, n.URL())
		if !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("password over plaintext: %v; want ErrInvalidOption", err)
		}
		noSecret(t, err)
		tr, err := rabbitmq.New(ctx, n.URL()+"?allow_plaintext_auth=true")
		if err != nil {
			t.Fatalf("with allow_plaintext_auth=true: %v", err)
		}
		_ = tr.Close(ctx)
	})
}
