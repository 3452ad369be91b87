package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestHeaderOverFrameMax: a message whose headers make the content header
// frame exceed the negotiated frame_max is refused by Publish with
// transport.ErrInvalidMessage naming the header, before anything is
// written; the connection stays up (no loss logged, no reconnect) and
// the 200 publishes pipelined around it on the same channel are each
// confirmed and stored exactly once. At the boundary, a header frame of
// exactly frame_max less the 8 KiB Publish keeps free is accepted and comes
// back byte for byte, and one byte more is refused.
func TestHeaderOverFrameMax(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs syncBuffer
	tr := open(t, rabbitmq.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	topic := transporttest.UniqueName(t, "framemax")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	frameMax := rabbitmq.FrameMax(tr)
	if frameMax != 131072 {
		t.Fatalf("negotiated frame_max %d, want RabbitMQ's default 131072", frameMax)
	}

	// Over the limit, among 200 pipelined publishes.
	big := &handler.Message{ID: "big", Topic: topic, Key: "k", Payload: []byte("x"),
		Headers: map[string]string{"small": "s", "huge": strings.Repeat("h", frameMax)}}
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	var bigErr error
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = tr.Publish(ctx, &handler.Message{ID: "m" + itoa(i), Topic: topic, Key: "k", Payload: []byte("p")})
		}()
		if i == n/2 {
			bigErr = tr.Publish(ctx, big)
		}
	}
	wg.Wait()
	if !errors.Is(bigErr, transport.ErrInvalidMessage) || !strings.Contains(bigErr.Error(), `"huge"`) {
		t.Fatalf("Publish of a header over frame_max: %v; want ErrInvalidMessage naming header \"huge\"", bigErr)
	}
	if errors.Is(bigErr, transport.ErrUnknownOutcome) {
		t.Errorf("refusal reported as an unknown outcome: %v", bigErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("publish %d beside the refused one: %v", i, err)
		}
	}

	// At the boundary: a frame of exactly frame_max less the reserve
	// passes, one more byte does not.
	limit := frameMax - rabbitmq.PublishReserve
	at := &handler.Message{ID: "at", Topic: topic, Key: "k", Payload: []byte("y"), Headers: map[string]string{"huge": ""}}
	pad := limit - rabbitmq.PublishedHeaderFrameSize(at)
	at.Headers["huge"] = strings.Repeat("a", pad)
	if got := rabbitmq.PublishedHeaderFrameSize(at); got != limit {
		t.Fatalf("sized %d, want %d", got, limit)
	}
	over := &handler.Message{ID: "over", Topic: topic, Key: "k", Payload: []byte("y"), Headers: map[string]string{"huge": strings.Repeat("a", pad+1)}}
	if err := tr.Publish(ctx, over); !errors.Is(err, transport.ErrInvalidMessage) {
		t.Fatalf("a header frame one byte over the limit: %v, want ErrInvalidMessage", err)
	}
	if err := tr.Publish(ctx, at); err != nil {
		t.Fatalf("a header frame of exactly the limit: %v", err)
	}

	// Every accepted message arrives once; the refused ones never.
	seen := map[string]int{}
	for len(seen) < n+1 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d: %v", len(seen), err)
		}
		m := d.Message()
		seen[m.ID]++
		if m.ID == "at" && m.Headers["huge"] != at.Headers["huge"] {
			t.Errorf("the boundary header came back changed (%d bytes)", len(m.Headers["huge"]))
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.Close(ctx)
	dups := 0
	for id, c := range seen {
		dups += c - 1
		if id == "big" || id == "over" {
			t.Errorf("refused message %s was delivered", id)
		}
	}
	if dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if c := queueDepth(t, topic+".g"); c != 0 {
		t.Errorf("%d messages left in the queue after all %d were received: duplicates", c, n+1)
	}
	if s := logs.String(); strings.Contains(s, "connection lost") || strings.Contains(s, "reconnected") {
		t.Errorf("the connection dropped:\n%s", s)
	}
}

// queueDepth is the number of ready messages in queue q.
func queueDepth(tb testing.TB, q string) int {
	tb.Helper()
	ch, err := rawConn(tb, brokerURL()).Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer ch.Close()
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return qi.Messages
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
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
