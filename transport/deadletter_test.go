package transport_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

func TestDeadLetterSharesNothingAndReadsBack(t *testing.T) {
	m := &handler.Message{ID: "evt-1", Key: "order-1", Topic: "orders", Payload: []byte(`{"total":1}`),
		Headers: map[string]string{"a": "1", transport.HeaderError: "stale"}}
	m.SetFacts(handler.Facts{Attempt: 2, Subscription: "inventory", Group: "inv", Partition: 3, Offset: 42, BrokerID: "3/42"})
	at := time.Unix(0, 5).UTC()
	dl := transport.NewDeadLetter(m, handler.Permanentf("fresh"), at).Message(m, "inv.dlq")
	if dl.Headers["a"] != "1" || dl.Key != "order-1" {
		t.Fatalf("dead letter lost the original's key or headers: key %q, headers %v", dl.Key, dl.Headers)
	}
	dl.Headers["a"] = "changed"
	dl.Payload[0] = 'X'
	if m.Headers["a"] != "1" || m.Payload[0] != '{' || m.Headers[transport.HeaderError] != "stale" {
		t.Fatal("dead letter shares state with the original")
	}
	if dl.ID != "evt-1" || dl.Key != "order-1" || dl.Topic != "inv.dlq" || dl.Facts() != (handler.Facts{}) {
		t.Fatalf("dead letter %+v", dl)
	}
	got, ok := transport.ReadDeadLetter(dl)
	want := transport.DeadLetter{Error: "permanent: fresh", Class: "permanent", Attempts: 2, Subscription: "inventory",
		Group: "inv", OriginalTopic: "orders", Partition: 3, Offset: 42, BrokerID: "3/42", FirstFailure: at, LastFailure: at}
	if !ok || got != want {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if _, ok := transport.ReadDeadLetter(m.Clone()); !ok {
		t.Fatal("a message carrying ferry-error must read as a dead letter")
	}
	if r, ok := transport.ReadDeadLetter(&handler.Message{ID: "x"}); ok || r.Partition != -1 || r.Offset != -1 {
		t.Fatalf("a plain message read as a dead letter: %+v", r)
	}
	back := transport.StripDeadLetterHeaders(dl, "orders")
	if len(back.Headers) != 1 || back.Headers["a"] != "changed" || back.Topic != "orders" {
		t.Fatalf("replayed headers %v", back.Headers)
	}
}

func TestDeadLetterKeepsABoundedPanicStack(t *testing.T) {
	m := &handler.Message{ID: "evt-1"}
	stack := []byte(strings.Repeat("x", 10000))
	d := transport.NewDeadLetter(m, &handler.PanicError{Value: "boom", Stack: stack}, time.Now())
	if d.Class != "panic" || d.Attempts != 1 || !strings.Contains(d.Error, "boom") || len(d.Error) > 4096+200 {
		t.Fatalf("class %s attempts %d error of %d bytes", d.Class, d.Attempts, len(d.Error))
	}
	if d := transport.NewDeadLetter(m, nil, time.Now()); d.Error == "" {
		t.Fatal("a nil error must still leave a record")
	}
}

func TestDLQName(t *testing.T) {
	sub := transport.Subscription{Topic: "orders", Group: "inventory"}
	if got := transport.DLQName(nil, sub); got != "inventory.dlq" {
		t.Fatalf("DLQName = %q", got)
	}
	if got := transport.DLQName(nil, transport.Subscription{Topic: "orders"}); got != "orders.dlq" {
		t.Fatalf("DLQName without group = %q", got)
	}
	if got := transport.DLQName(fifoNamer{}, sub); got != "inventory-dlq.fifo" {
		t.Fatalf("DLQName of a DLQNamer = %q", got)
	}
}

type fifoNamer struct{}

func (fifoNamer) DLQName(sub transport.Subscription) string { return sub.Group + "-dlq.fifo" }

// TestDeadLetterErrorTextBounded: a handler's error of any length or bytes
// becomes an error text every broker can carry in a header: valid UTF-8,
// at most 8 KiB, cut on a rune boundary and marked (a 200 KB error made
// the RabbitMQ dead letter exceed the frame, so it could never be written).
func TestDeadLetterErrorTextBounded(t *testing.T) {
	m := &handler.Message{ID: "m", Topic: "t"}
	long := strings.Repeat("é", 100_000) // 200 KB, two bytes a rune
	d := transport.NewDeadLetter(m, errors.New("bad \xff "+long), time.Now())
	if len(d.Error) > 8<<10 || !utf8.ValidString(d.Error) {
		t.Fatalf("error text of %d bytes, valid UTF-8 %v: want at most 8 KiB and valid", len(d.Error), utf8.ValidString(d.Error))
	}
	if !strings.HasPrefix(d.Error, "bad \uFFFD é") || !strings.HasSuffix(d.Error, "(error text truncated)") {
		t.Fatalf("error text %q…%q: want the start kept and the cut marked", d.Error[:20], d.Error[len(d.Error)-30:])
	}
	if short := transport.NewDeadLetter(m, errors.New("stock service down"), time.Now()); short.Error != "stock service down" {
		t.Fatalf("a short error became %q", short.Error)
	}
}
