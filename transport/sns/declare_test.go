package sns_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestDeclareIsStream: for every shape of subscription, Declare says what
// the opened stream's Semantics say: FanOut, SNS's payload limit, per-key
// order on a FIFO topic, none (with the FIFO topic as the hint) on a
// standard one, NativeDLQ with a redrive policy.
func TestDeclareIsStream(t *testing.T) {
	t.Parallel()
	tr := open(t)
	base := transporttest.UniqueName(t, "decl")
	for _, c := range []struct {
		sub   transport.Subscription
		order transport.Ordering
	}{
		{transport.Subscription{Topic: base, Group: "a"}, transport.OrderNone},
		{transport.Subscription{Topic: base + "-f.fifo", Group: "b"}, transport.OrderPerKey},
		{transport.Subscription{Topic: base, Group: "c", Options: map[string]string{"max_receive_count": "3", "queue": base + "-own"}}, transport.OrderNone},
		{transport.Subscription{Topic: base, Options: map[string]string{"filter_policy": `{"x":["y"]}`, "visibility": "2s"}}, transport.OrderNone},
	} {
		want, err := tr.Declare(c.sub)
		if err != nil {
			t.Fatalf("Declare(%+v): %v", c.sub, err)
		}
		st, err := tr.Subscribe(context.Background(), c.sub)
		if err != nil {
			t.Fatal(err)
		}
		got := st.Semantics()
		_ = st.Close(context.Background())
		if got != want {
			t.Errorf("%+v: stream declares\n%+v\nDeclare said\n%+v", c.sub, got, want)
		}
		if want.Ordering != c.order || !want.FanOut || want.Transport != sns.Scheme || want.MaxPayload != sns.MaxMessageSize-8<<10 {
			t.Errorf("%+v: Declare = %+v", c.sub, want)
		}
		if (want.Ordering == transport.OrderNone) != strings.Contains(want.OrderingHint, "FIFO topic") {
			t.Errorf("%+v: Ordering %v with OrderingHint %q", c.sub, want.Ordering, want.OrderingHint)
		}
		if want.NativeDLQ != (c.sub.Options["max_receive_count"] != "") {
			t.Errorf("%+v: NativeDLQ %t", c.sub, want.NativeDLQ)
		}
	}
}

// TestNewRefuses: sns:// takes the keys of sqs:// and the same rule (a
// repeated or unknown key is refused, naming it, and so is an http://
// endpoint without allow_plaintext_auth=true); Subscription.Options take
// this package's keys and package sqs's subscriber keys.
func TestNewRefuses(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	for _, bad := range []string{"sns://?region=us-east-1&region=eu-west-1", "sns://?region=us-east-1&colour=blue",
		"sns://AKIA:s3cret@x?region=us-east-1", "sqs://?region=us-east-1",
		"sns://?region=us-east-1&endpoint=http://127.0.0.1:4566"} {
		_, err := sns.New(ctx, bad)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "sns:") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(%q) = %v; want ErrInvalidOption from sns, without the secret", bad, err)
		}
	}
	tr, err := sns.New(ctx, "sns://?region=us-east-1&visibility=5s&max_receive_count=3&publish_concurrency=2&call_timeout=5s&content_dedupe=true")
	if err != nil {
		t.Fatalf("New with sqs keys: %v", err)
	}
	for _, opts := range []map[string]string{{"colour": "blue"}, {"filter_scope": "x", "wait": "forever"}, {"queue": "q.fifo"}} {
		if _, err := tr.Declare(transport.Subscription{Topic: "orders", Options: opts}); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare with %v = %v; want ErrInvalidOption", opts, err)
		}
	}
}

// TestCallTimeout: against a listener that never answers, Publish returns
// within the call timeout naming CreateTopic and the host, a clean failure
// (nothing was sent); when only SNS Publish is unanswered, Publish returns
// within the timeout naming Publish and the host, and wraps
// transport.ErrUnknownOutcome.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	const timeout, within = 500 * time.Millisecond, 2500 * time.Millisecond
	openAt := func(endpoint string) *sns.Transport {
		cfg := aws.Config{Region: fauxqs.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
		tr, err := sns.New(context.Background(), "sns://?allow_plaintext_auth=true&call_timeout=500ms&endpoint="+url.QueryEscape(endpoint), sqs.WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}
	check := func(what string, took time.Duration, err error, op, host string, unknown bool) {
		t.Helper()
		if err == nil || took > within || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), host) ||
			!errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrUnknownOutcome) != unknown {
			t.Errorf("%s took %s (CallTimeout %s) and returned %v; want an error naming %s and %s, unknown outcome %t",
				what, took, timeout, err, op, host, unknown)
		}
	}
	msg := &handler.Message{ID: "1", Topic: transporttest.UniqueName(t, "mute"), Payload: []byte("x")}

	silent := fauxqs.Silent(t)
	start := time.Now()
	err := openAt("http://"+silent).Publish(context.Background(), msg)
	check("Publish to a silent server", time.Since(start), err, "CreateTopic", silent, false)

	muted := fauxqs.ForTest(t).Mute(t, "Publish")
	start = time.Now()
	err = openAt(muted).Publish(context.Background(), msg)
	check("Publish unanswered", time.Since(start), err, "Publish", strings.TrimPrefix(muted, "http://"), true)
}

// TestRouterRefusesOrder: a Router refuses, at Add, per-key order on a
// standard topic, quoting the FIFO topic that would keep it.
func TestRouterRefusesOrder(t *testing.T) {
	t.Parallel()
	tr := open(t)
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	nop := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	err = r.Add("std", tr, transport.Subscription{Topic: "orders"}, nop, ferry.PerKey())
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "FIFO topic") {
		t.Errorf("PerKey on a standard topic: Add = %v; want ErrInvalidOption naming the FIFO topic", err)
	}
	if err := r.Add("fifo", tr, transport.Subscription{Topic: "orders.fifo"}, nop, ferry.PerKey()); err != nil {
		t.Errorf("PerKey on a FIFO topic: Add = %v", err)
	}
}
