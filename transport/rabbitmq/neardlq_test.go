package rabbitmq_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestNearFrameMaxDeadLetter: the largest message Publish accepts (its
// header frame at frame_max less the 8 KiB reserve) still has room for
// what it gathers on its way to the DLQ: through a retry queue (x-death,
// x-ferry-*), the delivery count, the transport's dead-letter record. It
// reaches the DLQ after delivery_limit (the handler ran on attempts 1 and
// 2), with its header intact and the record, and ListDLQ reads it without
// a frame error dropping the connection.
func TestNearFrameMaxDeadLetter(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	tr := open(t, rabbitmq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	topic := transporttest.UniqueName(t, "neardlq")
	cleanupSub(t, brokerURL(), topic, "g", 0, 100*time.Millisecond, time.Second)
	m := &handler.Message{ID: "near", Topic: topic, Key: "k", Payload: []byte("p"), Headers: map[string]string{"big": ""}}
	big := strings.Repeat("b", rabbitmq.FrameMaxDefault-rabbitmq.PublishReserve-rabbitmq.PublishedHeaderFrameSize(m))
	m.Headers["big"] = big
	var runs atomic.Int64
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		runs.Add(1)
		return errors.New("cannot handle")
	})
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptDeliveryLimit: "1"}}
	if err := r.Add("near", tr, sub, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	dlq := rabbitmq.DLQName(topic + ".g")
	var dead []*handler.Message
	waitFor(t, "the message in the DLQ", 30*time.Second, func() bool {
		dead, err = tr.ListDLQ(ctx, dlq, 10)
		return err == nil && len(dead) == 1
	})
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (delivery_limit 1)", n)
	}
	d := dead[0]
	if d.ID != "near" || d.Headers["big"] != big {
		t.Errorf("dead letter %q lost its header (%d bytes)", d.ID, len(d.Headers["big"]))
	}
	if e, want := d.Headers[transport.HeaderError], "rabbitmq: delivery limit 1 reached in queue "+topic+".g"; e != want {
		t.Errorf("ferry-error %q, want %q", e, want)
	}
	if s := logs.String(); strings.Contains(s, "frame") {
		t.Errorf("the connection dropped over a frame:\n%s", s)
	}
}
