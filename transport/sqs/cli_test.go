package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/sqs/wire"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// cliOnce picks the aws CLI to use, once per process.
var cliOnce struct {
	sync.Once
	bin, why string
}

// awsCLI runs an aws CLI against the emulator. Debian's awscli 2.9 speaks
// SQS's older query protocol, which fauxqs does not emulate (it answers
// "Unknown action"); a CLI whose botocore speaks SQS's JSON protocol (from
// 1.31 on) works. awsCLI uses the first aws on PATH or at /usr/bin/aws that
// can list queues, and skips when none can (fails when none is installed
// and FERRY_REQUIRE_BROKERS=1).
func awsCLI(t *testing.T, srv *fauxqs.Server, args ...string) []byte {
	t.Helper()
	cliOnce.Do(func() {
		var cands []string
		if p, err := exec.LookPath("aws"); err == nil {
			cands = append(cands, p)
		}
		if _, err := os.Stat("/usr/bin/aws"); err == nil {
			cands = append(cands, "/usr/bin/aws")
		}
		if len(cands) == 0 {
			cliOnce.why = "no aws CLI installed (apt-get install awscli)"
			return
		}
		for _, c := range cands {
			if _, err := runCLI(c, srv, "sqs", "list-queues"); err == nil {
				cliOnce.bin = c
				return
			} else {
				cliOnce.why += fmt.Sprintf("%s: %v; ", c, err)
			}
		}
		cliOnce.why = "no aws CLI here speaks SQS's JSON protocol to fauxqs: " + cliOnce.why
	})
	if cliOnce.bin == "" {
		if os.Getenv(fauxqs.EnvRequire) == "1" && strings.HasPrefix(cliOnce.why, "no aws CLI installed") {
			t.Fatal(cliOnce.why)
		}
		t.Skip(cliOnce.why)
	}
	out, err := runCLI(cliOnce.bin, srv, args...)
	if err != nil {
		t.Fatalf("aws %v: %v", args, err)
	}
	return out
}

func runCLI(bin string, srv *fauxqs.Server, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--endpoint-url", srv.URL, "--region", fauxqs.Region, "--output", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_PAGER=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// TestCLIInterop: a message sent with `aws sqs send-message` is handled by
// a Ferry stream (its attributes as headers, the MessageId as ID), and one
// Ferry publishes is readable with `aws sqs receive-message`.
func TestCLIInterop(t *testing.T) {
	t.Parallel()
	srv := fauxqs.ForTest(t)
	tr := open(t)
	name := transporttest.UniqueName(t, "cli")
	ctx := context.Background()
	info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueue(t, tr, info.URL) })

	// aws → Ferry
	var sent struct{ MessageId string }
	if err := json.Unmarshal(awsCLI(t, srv, "sqs", "send-message", "--queue-url", info.URL,
		"--message-body", `{"order_id":"o-1","total":750}`,
		"--message-attributes", `{"tenant":{"DataType":"String","StringValue":"acme"},"total":{"DataType":"Number","StringValue":"750"}}`), &sent); err != nil {
		t.Fatal(err)
	}
	st := subscribe(t, tr, transport.Subscription{Topic: name})
	d := receive(t, st)
	m := d.Message()
	if string(m.Payload) != `{"order_id":"o-1","total":750}` || m.Headers["tenant"] != "acme" || m.Headers["total"] != "750" || m.ID != sent.MessageId {
		t.Errorf("from the CLI got ID %q payload %q headers %v; want ID %q (the MessageId) and the attributes", m.ID, m.Payload, m.Headers, sent.MessageId)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close(ctx)

	// Ferry → aws
	if err := tr.Publish(ctx, &handler.Message{ID: "evt-9", Key: "order-9", Topic: name,
		Payload: []byte(`{"order_id":"o-9"}`), Headers: map[string]string{"tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []struct {
			Body              string
			MessageAttributes map[string]struct{ StringValue, DataType string }
		}
	}
	for range 5 {
		if err := json.Unmarshal(awsCLI(t, srv, "sqs", "receive-message", "--queue-url", info.URL,
			"--message-attribute-names", "All", "--wait-time-seconds", "2"), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) > 0 {
			break
		}
	}
	if len(got.Messages) != 1 {
		t.Fatalf("aws sqs receive-message got %d messages, want 1", len(got.Messages))
	}
	g := got.Messages[0]
	if g.Body != `{"order_id":"o-9"}` || g.MessageAttributes[wire.IDAttribute].StringValue != "evt-9" ||
		g.MessageAttributes[wire.KeyAttribute].StringValue != "order-9" || g.MessageAttributes["tenant"].StringValue != "acme" {
		t.Errorf("aws CLI read body %q attributes %v", g.Body, g.MessageAttributes)
	}
}
