package doccheck

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/jetstream"
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/mqtt"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
)

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }

// A declared row of docs/choosing-a-broker.md: a URL as documented and the
// topic its subscription reads.
type declared struct {
	url, topic string
}

// choices are the rows of the page's table, in its order: each
// transport's default URL, and the settings that change what it keeps.
var choices = []declared{
	{"memory://shop", "orders"},
	{"kafka://127.0.0.1:9092", "orders"},
	{"redis://127.0.0.1:6379/0", "orders"},
	{"redis://127.0.0.1:6379/0?shards=4", "orders"},
	{"redis://127.0.0.1:6379/0?mode=shared", "orders"},
	{"amqp://guest:guest@127.0.0.1:5672/", "orders"},
	{"amqp://guest:guest@127.0.0.1:5672/?shards=4", "orders"},
	{"amqp://guest:guest@127.0.0.1:5672/?ordered=false", "orders"},
	{"mqtt://127.0.0.1:1883", "orders"},
	{"mqtt://127.0.0.1:1883?format=raw", "orders"},
	{"nats://127.0.0.1:4222", "orders"},
	{"nats://127.0.0.1:4222?partitions=4", "orders"},
	{"nats://127.0.0.1:4222?mode=shared", "orders"},
	{"sqs://?region=eu-west-1", "orders"},
	{"sqs://?region=eu-west-1", "orders.fifo"},
	{"sqs://?region=eu-west-1&max_receive_count=5", "orders.fifo"},
	{"sns://?region=eu-west-1", "orders"},
	{"sns://?region=eu-west-1", "orders.fifo"},
}

// TestChoosingABrokerTable renders the table of docs/choosing-a-broker.md
// from what each transport declares (transport.Declarer's Declare, or the
// Semantics of a stream where a transport cannot declare before
// subscribing) for the page's URLs, pointed at the test brokers, and fails
// when the page's table differs. The failure prints the table to paste.
func TestChoosingABrokerTable(t *testing.T) {
	rows := make([]string, len(choices))
	t.Run("declare", func(t *testing.T) {
		for i, c := range choices {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				sem := declare(t, testbrokers.URL(t, c.url), c.topic)
				rows[i] = row(c, sem)
			})
		}
	})
	if t.Failed() {
		return
	}
	want := tableHeader + strings.Join(rows, "\n") + "\n"
	data, err := os.ReadFile("../../docs/choosing-a-broker.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), tableHeader)
	if !ok {
		t.Fatalf("docs/choosing-a-broker.md lacks the table; it should read:\n\n%s", want)
	}
	got := tableHeader
	for _, l := range strings.SplitAfter(after, "\n") {
		if !strings.HasPrefix(l, "|") {
			break
		}
		got += l
	}
	if got != want {
		t.Fatalf("docs/choosing-a-broker.md's table differs from what the transports declare; it should read:\n\n%s", want)
	}
}

const tableHeader = "| URL | topic | Ordering | Ack | Redelivery | Nack delay | Attempts | Lease extension | Native DLQ | Fan-out | Replay | Headers | Max payload |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// declare returns what a subscription to topic on rawURL declares.
func declare(t *testing.T, rawURL, topic string) transport.Semantics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("open %s: %v", transport.RedactString(rawURL), err)
	}
	defer tr.Close(context.Background())
	sub := transport.Subscription{Topic: topic, Group: "choosing"}
	if d, ok := tr.(transport.Declarer); ok {
		sem, err := d.Declare(sub)
		if err != nil {
			t.Fatalf("declare on %s: %v", transport.RedactString(rawURL), err)
		}
		return sem
	}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatalf("subscribe on %s: %v", transport.RedactString(rawURL), err)
	}
	defer st.Close(context.Background())
	return st.Semantics()
}

func row(c declared, s transport.Semantics) string {
	attempts := "in process"
	if s.Attempts {
		attempts = "broker"
	}
	ordering := s.Ordering.String()
	if s.Ordering == transport.OrderNone && s.OrderingHint != "" {
		ordering += " (Add refuses per-key)"
	}
	return "| `" + c.url + "` | " + c.topic + " | " + ordering + " | " + s.Ack.String() + " | " + s.Redelivery.String() + " | " +
		yes(s.NackDelay) + " | " + attempts + " | " + yes(s.Extend) + " | " + yes(s.NativeDLQ) + " | " +
		yes(s.FanOut) + " | " + yes(s.Replay) + " | " + yes(s.Headers) + " | " + size(s.MaxPayload) + " |"
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// size prints n bytes in the largest binary unit that divides it.
func size(n int) string {
	switch {
	case n == 0:
		return "no limit"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
