package sqs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testcerts"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// tlsEndpoint serves the test emulator over TLS with a server certificate
// of a CA made for the test (fauxqs speaks plain HTTP only, so a TLS
// front end of this process terminates it), and returns its https URL
// and the CA.
func tlsEndpoint(t *testing.T) (string, *testcerts.CA) {
	t.Helper()
	target, err := url.Parse(fauxqs.ForTest(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "ferry-test-ca")
	certFile, keyFile := ca.Server(t, dir, "fauxqs")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, ca
}

// TestTLS: over an https endpoint whose certificate comes from a CA made
// for the test, the transport opens without allow_plaintext_auth and
// publishes and receives when the CA is trusted (AWS_CA_BUNDLE, which the
// standard chain reads); with another CA, Publish fails with an error
// wrapping x509.UnknownAuthorityError that names the host, and nothing
// is sent.
func TestTLS(t *testing.T) {
	endpoint, ca := tlsEndpoint(t)
	host := strings.TrimPrefix(endpoint, "https://")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()
	name := transporttest.UniqueName(t, "tls")
	rawURL := "sqs://?region=" + fauxqs.Region + "&call_timeout=5s&wait=1s&endpoint=" + url.QueryEscape(endpoint)

	t.Setenv("AWS_CA_BUNDLE", ca.File)
	tr, err := sqs.New(ctx, rawURL)
	if err != nil {
		t.Fatalf("New over https with the right CA: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	if err := tr.Publish(ctx, &handler.Message{ID: "tls-1", Topic: name, Payload: []byte("over TLS")}); err != nil {
		t.Fatalf("Publish over TLS: %v", err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	if d := receive(t, st); d.Message().ID != "tls-1" {
		t.Errorf("received %q, want tls-1", d.Message().ID)
	} else {
		_ = d.Ack(ctx)
	}

	other := testcerts.NewCA(t, t.TempDir(), "another-ca")
	t.Setenv("AWS_CA_BUNDLE", other.File)
	wrong, err := sqs.New(ctx, rawURL)
	if err != nil {
		t.Fatalf("New with another CA: %v (it calls nothing)", err)
	}
	t.Cleanup(func() { _ = wrong.Close(context.Background()) })
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = wrong.Publish(pctx, &handler.Message{ID: "tls-2", Topic: name, Payload: []byte("x")})
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) || !strings.Contains(err.Error(), host) || errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish trusting another CA = %v; want an x509.UnknownAuthorityError naming %s, not an unknown outcome", err, host)
	}
	if lag, err := tr.Lag(ctx, transport.Subscription{Topic: name}); err != nil || len(lag) != 1 || lag[0].Messages != 0 {
		t.Errorf("Lag after the refused handshake = %v, %v; want 0 messages", lag, err)
	}
}

// refusingKeys serves the emulator but answers every request signed with
// another access key than "test" as AWS answers an unknown one (HTTP 400,
// UnrecognizedClientException): fauxqs checks no credentials, so this
// front end plays that part of AWS. It returns its URL.
func refusingKeys(t *testing.T) string {
	t.Helper()
	target, err := url.Parse(fauxqs.ForTest(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Authorization"), "Credential=test/") {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("X-Amzn-Query-Error", "InvalidClientTokenId;Sender")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAuthRefused: a call AWS refuses for its credentials fails with an
// error wrapping sqs.ErrAuth that names the refusal and never the secret
// key, not an unknown outcome (nothing was written); the same endpoint
// with the right key works.
func TestAuthRefused(t *testing.T) {
	t.Parallel()
	endpoint := refusingKeys(t)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "auth")
	for _, key := range []string{"wrongKeyId", "test"} {
		cfg := aws.Config{Region: fauxqs.Region, Credentials: credentials.NewStaticCredentialsProvider(key, "s3cretAccessKey", "")}
		tr, err := sqs.New(ctx, "sqs://?allow_plaintext_auth=true&call_timeout=5s&endpoint="+url.QueryEscape(endpoint), sqs.WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		err = tr.Publish(ctx, &handler.Message{ID: "a-1", Topic: name, Payload: []byte("x")})
		_ = tr.Close(ctx)
		if key == "test" {
			if err != nil {
				t.Errorf("Publish with the right key: %v", err)
			}
			continue
		}
		if !errors.Is(err, sqs.ErrAuth) || errors.Is(err, transport.ErrUnknownOutcome) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Publish with an unknown key = %v; want an error wrapping sqs.ErrAuth, without the secret", err)
		}
	}
}
