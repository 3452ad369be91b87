package rabbitmq_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
)

// TestPlaintextAuth: credentials over amqp:// without TLS are refused by
// New (ErrInvalidOption, naming allow_plaintext_auth and never the
// password) unless the URL opts in, except RabbitMQ's public default
// guest:guest, written or implied; tls_insecure is
// refused on amqp:// without TLS files. With the opt-in, credentials the broker refuses give an error
// wrapping ErrAuth that names the host and not the password.
func TestPlaintextAuth(t *testing.T) {
	requireRabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refused := []string{
		"amqp://app:s3cret-pw@127.0.0.1:5672/",
		"amqp://guest:s3cret-pw@127.0.0.1:5672/",
		"amqp://app:s3cret-pw@127.0.0.1:5672/?allow_plaintext_auth=false",
		"amqp://guest:guest@127.0.0.1:5672/?tls_insecure=true",
	}
	for _, u := range refused {
		_, err := rabbitmq.New(ctx, u)
		if !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("New(%s) = %v; want ErrInvalidOption", transport.RedactString(u), err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error names the password: %v", err)
		}
		want := "allow_plaintext_auth"
		switch {
		case strings.Contains(u, "tls_insecure"):
			want = "tls_insecure"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New(%s) = %v; want it to name %s", transport.RedactString(u), err, want)
		}
	}
	for _, u := range []string{"amqp://guest:guest@127.0.0.1:5672/", "amqp://127.0.0.1:5672/"} {
		tr, err := rabbitmq.New(ctx, u)
		if err != nil {
			t.Errorf("New(%s): %v", u, err)
			continue
		}
		_ = tr.Close(ctx)
	}
	// The opt-in lets them through, to the broker's own refusal.
	_, err := rabbitmq.New(ctx, "amqp://app:s3cret-pw@127.0.0.1:5672/?allow_plaintext_auth=true")
	if !errors.Is(err, rabbitmq.ErrAuth) || !strings.Contains(err.Error(), "127.0.0.1:5672") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("wrong credentials with the opt-in: %v; want ErrAuth naming the host, not the password", err)
	}
	_, err = rabbitmq.New(ctx, "amqp://app:s3cret-pw@127.0.0.1:5672/", rabbitmq.AllowPlaintextAuth(true))
	if !errors.Is(err, rabbitmq.ErrAuth) {
		t.Errorf("wrong credentials with AllowPlaintextAuth(true): %v; want ErrAuth", err)
	}
	// A TLS option means TLS: no plaintext refusal, and a TLS handshake
	// (which the plaintext port fails).
	_, err = rabbitmq.New(ctx, "amqp://app:s3cret-pw@127.0.0.1:5672/?timeout=2s", rabbitmq.TLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	if err == nil || errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "(TLS)") {
		t.Errorf("amqp:// with the TLS option against a plaintext port: %v; want a TLS connect error", err)
	}
}
