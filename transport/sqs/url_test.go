package sqs_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestNewRefuses: New and transport.Open refuse the same bad URLs and
// options, with an error wrapping transport.ErrInvalidOption that names the
// key and never repeats a secret.
func TestNewRefuses(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	const ok = "sqs://?region=us-east-1"
	cases := map[string]struct {
		url  string
		opts []sqs.Option
		says string
	}{
		"repeated key":       {url: ok + "&region=eu-west-1", says: `"region" given more than once`},
		"unknown key":        {url: ok + "&colour=blue", says: "colour"},
		"malformed duration": {url: ok + "&visibility=abc", says: "visibility"},
		"bare seconds":       {url: ok + "&wait=20", says: "wait"},
		"fractional lease":   {url: ok + "&visibility=1500ms", says: "Visibility"},
		"credentials":        {url: "sqs://AKIAEXAMPLE:s3cret@orders?region=us-east-1", says: "credentials"},
		"a path":             {url: "sqs://orders/extra?region=us-east-1", says: "path"},
		"endpoint":           {url: ok + "&endpoint=ftp://user:s3cret@host", says: "Endpoint"},
		"call_timeout 0":     {url: ok + "&call_timeout=0s", says: "CallTimeout"},
		"max_receive_count":  {url: ok + "&max_receive_count=0", says: "maxReceiveCount"},
		"empty dlq":          {url: ok + "&dlq=", says: "dlq"},
		"dlq name":           {url: ok + "&dlq=orders.dlq", says: "DeadLetterQueue"},
		"pollers":            {url: ok + "&pollers=0", says: "Pollers"},
		"publish_window":     {url: ok + "&publish_window=5", says: "PublishWindow"},
		"scheme":             {url: "sns://?region=us-east-1", says: "scheme"},
		"nil logger":         {url: ok, opts: []sqs.Option{sqs.WithLogger(nil)}, says: "WithLogger"},
		"nil option":         {url: ok, opts: []sqs.Option{nil}, says: "nil Option"},
	}
	for name, c := range cases {
		_, err := sqs.New(ctx, c.url, c.opts...)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: New = %v; want ErrInvalidOption saying %q", name, err, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error leaks the secret: %v", name, err)
		}
		if c.opts == nil && !strings.HasPrefix(c.url, "sns:") {
			_, oerr := transport.Open(ctx, c.url)
			if oerr == nil || err == nil || !strings.HasSuffix(oerr.Error(), err.Error()) {
				t.Errorf("%s: transport.Open = %v; want New's error %v", name, oerr, err)
			}
		}
	}
	// No region anywhere.
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	if _, err := sqs.New(ctx, "sqs://"); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "region") {
		t.Errorf("New without a region = %v; want ErrInvalidOption naming the region", err)
	}
}

// TestOpenURL: every key of the package doc is accepted by transport.Open,
// and the transport it opens works.
func TestOpenURL(t *testing.T) {
	srv := fauxqs.ForTest(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	conf := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(conf, []byte("[profile ferrytest]\nregion = eu-west-1\naws_access_key_id = test\naws_secret_access_key = test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", conf)
	ctx := context.Background()
	tr, err := transport.Open(ctx, "sqs://orders?region=us-east-1&endpoint="+srv.URL+"&profile=ferrytest&create=true"+
		"&id_attribute=ferry-id&number_headers=total,qty&content_dedupe=false&publish_concurrency=4&publish_window=100&call_timeout=10s"+
		"&visibility=5s&max_extension=10m&wait=1s&pollers=2&max_in_flight=50&dlq=orders-dlq&max_receive_count=4&allow_plaintext_auth=true")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	name := transporttest.UniqueName(t, "url")
	if err := tr.Publish(ctx, &handler.Message{ID: "1", Topic: name, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	st := subscribe(t, tr.(*sqs.Transport), transport.Subscription{Topic: name})
	d := receive(t, st)
	if d.Message().ID != "1" || !st.Semantics().NativeDLQ {
		t.Errorf("received %q, NativeDLQ %t; want 1 and the URL's redrive policy", d.Message().ID, st.Semantics().NativeDLQ)
	}
	_ = d.Ack(ctx)
	if got := transport.DLQName(tr, transport.Subscription{Topic: name}); got != "orders-dlq" {
		t.Errorf("DLQName = %q, want the URL's dlq", got)
	}
}

// TestSubscriptionOptions: Subscription.Options follow the URL's rule (a
// bad or unknown key is refused, by Declare and Subscribe alike) and
// override the transport's settings.
func TestSubscriptionOptions(t *testing.T) {
	t.Parallel()
	tr := open(t)
	for _, opts := range []map[string]string{
		{"colour": "blue"}, {"visibility": "soon"}, {"region": "eu-west-1"}, {"dlq": "x.fifo"},
	} {
		sub := transport.Subscription{Topic: transporttest.UniqueName(t, "opt"), Options: opts}
		if _, err := tr.Declare(sub); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare with %v = %v; want ErrInvalidOption", opts, err)
		}
		if _, err := tr.Subscribe(context.Background(), sub); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Subscribe with %v = %v; want ErrInvalidOption", opts, err)
		}
	}
}

// TestDeclareIsStream: for every shape of subscription, Declare says what
// the opened stream's Semantics say; a standard queue keeps no order and
// names the FIFO queue that would, a FIFO queue keeps order per key.
func TestDeclareIsStream(t *testing.T) {
	t.Parallel()
	tr := open(t)
	base := transporttest.UniqueName(t, "decl")
	for _, c := range []struct {
		sub   transport.Subscription
		order transport.Ordering
	}{
		{transport.Subscription{Topic: base}, transport.OrderNone},
		{transport.Subscription{Topic: base + "-f.fifo", Group: "g"}, transport.OrderPerKey},
		{transport.Subscription{Topic: base + "-r", Options: map[string]string{"max_receive_count": "3"}}, transport.OrderNone},
		{transport.Subscription{Topic: base + "-rf.fifo", Options: map[string]string{"dlq": base + "-x.fifo", "visibility": "2s"}}, transport.OrderPerKey},
		{transport.Subscription{Topic: base + "-m", MaxInFlight: 7, Options: map[string]string{"pollers": "1", "wait": "0s"}}, transport.OrderNone},
	} {
		want, err := tr.Declare(c.sub)
		if err != nil {
			t.Fatalf("Declare(%+v): %v", c.sub, err)
		}
		st := subscribe(t, tr, c.sub)
		if got := st.Semantics(); got != want {
			t.Errorf("%s: stream declares\n%+v\nDeclare said\n%+v", c.sub.Topic, got, want)
		}
		if want.Ordering != c.order {
			t.Errorf("%s: Ordering %v, want %v", c.sub.Topic, want.Ordering, c.order)
		}
		if hint := want.OrderingHint; (want.Ordering == transport.OrderNone) != strings.Contains(hint, ".fifo") {
			t.Errorf("%s: Ordering %v with OrderingHint %q", c.sub.Topic, want.Ordering, hint)
		}
		if want.NativeDLQ != (c.sub.Options["max_receive_count"] != "" || c.sub.Options["dlq"] != "") {
			t.Errorf("%s: NativeDLQ %t with options %v", c.sub.Topic, want.NativeDLQ, c.sub.Options)
		}
	}
}

// TestPlaintextAuth: a transport whose requests would be signed with
// credentials and sent to an http:// endpoint is refused at New with
// transport.ErrInvalidOption naming allow_plaintext_auth and the host
// (never the endpoint's user-info), wherever the endpoint comes from (the
// URL, WithConfig, AWS_ENDPOINT_URL_SQS); with allow_plaintext_auth=true,
// an https endpoint, or anonymous credentials it opens.
func TestPlaintextAuth(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	const host = "127.0.0.1:4566"
	plain := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String("http://" + host)}
	refused := map[string]func() (*sqs.Transport, error){
		"URL endpoint": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://?region=us-east-1&endpoint="+url.QueryEscape("http://admin:s3cret@"+host))
		},
		"Endpoint option": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://?region=us-east-1", sqs.Endpoint("http://"+host))
		},
		"WithConfig": func() (*sqs.Transport, error) { return sqs.New(ctx, "sqs://", sqs.WithConfig(plain)) },
		"opt-in overridden": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://?allow_plaintext_auth=true", sqs.WithConfig(plain), sqs.AllowPlaintextAuth(false))
		},
		"AWS_ENDPOINT_URL_SQS": func() (*sqs.Transport, error) {
			t.Setenv("AWS_ENDPOINT_URL_SQS", "http://"+host)
			defer os.Unsetenv("AWS_ENDPOINT_URL_SQS")
			return sqs.New(ctx, "sqs://?region=us-east-1")
		},
	}
	for name, f := range refused {
		_, err := f()
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "allow_plaintext_auth=true") ||
			!strings.Contains(err.Error(), host) {
			t.Errorf("%s: New with an http:// endpoint = %v; want ErrInvalidOption naming %s and allow_plaintext_auth", name, err, host)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "admin")) {
			t.Errorf("%s: the error shows the endpoint's user-info: %v", name, err)
		}
	}
	anon := plain
	anon.Credentials = aws.AnonymousCredentials{}
	opened := map[string]func() (*sqs.Transport, error){
		"allow_plaintext_auth=true": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://?region=us-east-1&allow_plaintext_auth=true&endpoint=http://"+host)
		},
		"AllowPlaintextAuth": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://", sqs.WithConfig(plain), sqs.AllowPlaintextAuth(true))
		},
		"https": func() (*sqs.Transport, error) {
			return sqs.New(ctx, "sqs://?region=us-east-1&endpoint=https://"+host)
		},
		"anonymous": func() (*sqs.Transport, error) { return sqs.New(ctx, "sqs://", sqs.WithConfig(anon)) },
		"AWS's own": func() (*sqs.Transport, error) { return sqs.New(ctx, "sqs://?region=us-east-1") },
	}
	for name, f := range opened {
		tr, err := f()
		if err != nil {
			t.Errorf("%s: New = %v; want it to open", name, err)
			continue
		}
		_ = tr.Close(ctx)
	}
	if _, err := sqs.New(ctx, "sqs://?region=us-east-1&allow_plaintext_auth=maybe"); !errors.Is(err, transport.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "allow_plaintext_auth") {
		t.Errorf("allow_plaintext_auth=maybe: New = %v; want ErrInvalidOption naming the key", err)
	}
}
