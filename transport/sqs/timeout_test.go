package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// callTimeout is the CallTimeout of the deadline tests, and within is how
// long a call may take with it: the timeout plus scheduling slack.
const (
	callTimeout = 500 * time.Millisecond
	within      = callTimeout + 2*time.Second
)

// openAt opens a Transport on endpoint with dummy credentials and the
// deadline tests' call timeout.
func openAt(t *testing.T, endpoint string, opts ...sqs.Option) *sqs.Transport {
	t.Helper()
	cfg := aws.Config{Region: fauxqs.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	tr, err := sqs.New(context.Background(), "sqs://?allow_plaintext_auth=true&call_timeout=500ms&wait=0s&endpoint="+url.QueryEscape(endpoint),
		append([]sqs.Option{sqs.WithConfig(cfg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// checkTimeout asserts that err came within the deadline and names op and
// host.
func checkTimeout(t *testing.T, what string, took time.Duration, err error, op, host string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s against a server that never answers returned nil", what)
	}
	if took > within {
		t.Errorf("%s took %s; want at most %s (CallTimeout %s)", what, took, within, callTimeout)
	}
	if !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), host) {
		t.Errorf("%s: error %q does not name the operation %s and the host %s", what, err, op, host)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: error %v does not wrap context.DeadlineExceeded", what, err)
	}
	if text := fmt.Sprintf("%v %+v", err, err); strings.Contains(text, "s3cret") || strings.Contains(text, "admin") {
		t.Errorf("%s: error %q shows the endpoint's user-info", what, err)
	}
}

// TestCallTimeoutSilentServer: against a TCP listener that accepts and
// never answers, New returns at once (it calls nothing), and Publish,
// Subscribe and ListDLQ return within the call timeout with an error
// naming the operation and the host, never the endpoint's user-info.
// Nothing could have been written (the queue was never resolved), so the
// publish error is a clean failure, not an unknown outcome.
func TestCallTimeoutSilentServer(t *testing.T) {
	t.Parallel()
	host := fauxqs.Silent(t)
	start := time.Now()
	tr := openAt(t, "http://admin:s3cret@"+host)
	if took := time.Since(start); took > within {
		t.Errorf("New took %s against a silent server; it calls nothing", took)
	}
	ctx := context.Background()
	start = time.Now()
	err := tr.Publish(ctx, &handler.Message{ID: "1", Topic: "orders", Payload: []byte("x")})
	checkTimeout(t, "Publish", time.Since(start), err, "GetQueueUrl", host)
	if errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish that never resolved its queue = %v; nothing was sent, so it is not an unknown outcome", err)
	}
	start = time.Now()
	_, err = tr.Subscribe(ctx, transport.Subscription{Topic: "orders"})
	checkTimeout(t, "Subscribe", time.Since(start), err, "GetQueueUrl", host)
	start = time.Now()
	_, err = tr.ListDLQ(ctx, "orders-dlq", 10)
	checkTimeout(t, "ListDLQ", time.Since(start), err, "GetQueueUrl", host)
}

// TestCallTimeoutPublish: when SendMessageBatch gets no answer, Publish
// and PublishBatch return within the call timeout with an error that names
// the operation and the host and wraps transport.ErrUnknownOutcome: the
// message may have been written.
func TestCallTimeoutPublish(t *testing.T) {
	t.Parallel()
	endpoint := fauxqs.ForTest(t).Mute(t, "SendMessageBatch")
	host := strings.TrimPrefix(endpoint, "http://")
	tr := openAt(t, endpoint)
	ctx := context.Background()
	name := transporttest.UniqueName(t, "mute")
	start := time.Now()
	err := tr.Publish(ctx, &handler.Message{ID: "1", Topic: name, Payload: []byte("x")})
	checkTimeout(t, "Publish", time.Since(start), err, "SendMessageBatch", host)
	if !errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("Publish = %v; want an error wrapping transport.ErrUnknownOutcome", err)
	}
	start = time.Now()
	err = tr.PublishBatch(ctx, []*handler.Message{{ID: "2", Topic: name, Payload: []byte("x")}, {ID: "3", Topic: name, Payload: []byte("y")}})
	checkTimeout(t, "PublishBatch", time.Since(start), err, "SendMessageBatch", host)
	if !errors.Is(err, transport.ErrUnknownOutcome) {
		t.Errorf("PublishBatch = %v; want an error wrapping transport.ErrUnknownOutcome", err)
	}
}

// TestCallTimeoutReceive: a ReceiveMessage that gets no answer ends at the
// call timeout (plus the long-poll wait, 0 here), and Receive returns its
// error instead of the stream retrying by itself; the next Receive tries
// again, and fails the same way.
func TestCallTimeoutReceive(t *testing.T) {
	t.Parallel()
	endpoint := fauxqs.ForTest(t).Mute(t, "ReceiveMessage")
	host := strings.TrimPrefix(endpoint, "http://")
	tr := openAt(t, endpoint, sqs.Pollers(1))
	name := transporttest.UniqueName(t, "mute")
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := st.Receive(ctx)
		cancel()
		checkTimeout(t, "Receive", time.Since(start), err, "ReceiveMessage", host)
		if i == 0 && errors.Is(err, context.Canceled) {
			t.Fatalf("Receive = %v", err)
		}
	}
}
