package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// recordFor is the message number i of TestRecordsIntact: its key, ID,
// headers and payload all derive from i and have lengths that vary with
// it, so a record built with another message's bytes shows.
func recordFor(i int, topic string) *handler.Message {
	s := strconv.Itoa(i)
	m := &handler.Message{
		ID:      "id-" + s + strings.Repeat("i", i%13),
		Key:     "key-" + s + strings.Repeat("k", i%7),
		Topic:   topic,
		Payload: []byte("payload-" + s),
	}
	if i%3 != 0 {
		m.Headers = map[string]string{"n": s, "pad-" + strconv.Itoa(i%5): strings.Repeat("h", i%11)}
	}
	return m
}

// TestRecordsIntact publishes messages whose key, ID and headers all differ
// in content and length, from concurrent Publish calls (which reuse the
// producer's buffers) and from PublishBatch, and checks that each record
// received carries exactly its own message's fields.
func TestRecordsIntact(t *testing.T) {
	addrs := newCluster(t, 3)
	tr := open(t, addrs)
	createTopic(t, addrs, "intact", 3)
	st := subscribe(t, tr, transport.Subscription{Topic: "intact", Group: "g", StartAtOldest: true})
	const each = 1500
	var wg sync.WaitGroup
	errs := make(chan error, each)
	for g := range 32 {
		wg.Go(func() {
			for i := g; i < each; i += 32 {
				if err := tr.Publish(ctxT(t, 30*time.Second), recordFor(i, "intact")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Publish: %v", err)
	}
	batch := make([]*handler.Message, each)
	for i := range batch {
		batch[i] = recordFor(each+i, "intact")
	}
	publishAll(t, tr, batch)

	seen := map[string]bool{}
	for _, m := range receive(t, st, 2*each) {
		i, err := strconv.Atoi(strings.TrimPrefix(string(m.Payload), "payload-"))
		if err != nil {
			t.Fatalf("payload %q", m.Payload)
		}
		want := recordFor(i, "intact")
		if m.ID != want.ID || m.Key != want.Key || len(m.Headers) != len(want.Headers) {
			t.Fatalf("message %d: ID %q key %q headers %v; want %q, %q, %v", i, m.ID, m.Key, m.Headers, want.ID, want.Key, want.Headers)
		}
		for k, v := range want.Headers {
			if m.Headers[k] != v {
				t.Fatalf("message %d: header %s=%q, want %q", i, k, m.Headers[k], v)
			}
		}
		if seen[m.ID] {
			t.Fatalf("message %d received twice", i)
		}
		seen[m.ID] = true
	}
}

// TestPublishBatchUnknownOutcome: against a broker that never answers
// produce requests, every message of a PublishBatch is reported as an
// unknown outcome at the delivery timeout, and when ctx ends first, at
// once, as an unknown outcome that is also the context's error.
func TestPublishBatchUnknownOutcome(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(2, "void"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	tr, err := kafka.New(ctx, brokerURL(c.ListenAddrs()), kafka.DeliveryTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = tr.Close(cctx)
	}()
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true
	})
	msgs := func(prefix string) []*handler.Message {
		var ms []*handler.Message
		for i := range 5 {
			ms = append(ms, &handler.Message{ID: prefix + strconv.Itoa(i), Key: strconv.Itoa(i), Topic: "void", Payload: []byte("x")})
		}
		return ms
	}
	check := func(err error, also error) {
		t.Helper()
		var be *transport.BatchError
		if !errors.As(err, &be) || len(be.Errs) != 5 {
			t.Fatalf("PublishBatch: %v, want a BatchError of 5", err)
		}
		for i, e := range be.Errs {
			if !errors.Is(e, transport.ErrUnknownOutcome) || (also != nil && !errors.Is(e, also)) {
				t.Errorf("message %d: %v, want ErrUnknownOutcome (and %v)", i, e, also)
			}
		}
	}
	start := time.Now()
	check(tr.PublishBatch(ctx, msgs("a")), nil)
	if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Errorf("returned after %v, want about the 500ms delivery timeout", d)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	check(tr.PublishBatch(cctx, msgs("b")), context.DeadlineExceeded)
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Errorf("with a ctx of 100ms, returned after %v, want when the ctx ended", d)
	}
}

// TestWindowBackpressure: with PartitionWindow(10), a partition whose ten
// messages are all unsettled gets no more, while the other partition keeps
// flowing to its end; settling resumes the first, in offset order. Each
// partition holds more than one fetch (1 MiB), so fetching must resume;
// and the one PublishBatch of 2.4 MiB per partition checks that record
// batches stay under the broker's default message.max.bytes.
func TestWindowBackpressure(t *testing.T) {
	addrs := newCluster(t, 2)
	createTopic(t, addrs, "win", 2)
	tr := open(t, addrs, kafka.PartitionWindow(10))
	var keys [2]string
	for i := 0; keys[0] == "" || keys[1] == ""; i++ {
		k := "k" + strconv.Itoa(i)
		keys[kgoPartition(k, 2)] = k
	}
	const each = 600
	payload := make([]byte, 4096)
	var msgs []*handler.Message
	for i := range 2 * each {
		msgs = append(msgs, &handler.Message{ID: strconv.Itoa(i), Key: keys[i%2], Topic: "win", Payload: payload})
	}
	publishAll(t, tr, msgs)
	st := subscribe(t, tr, transport.Subscription{Topic: "win", Group: "g", StartAtOldest: true})

	ctx := ctxT(t, 30*time.Second)
	var held []transport.Delivery // partition 0, unsettled
	next := [2]int64{}            // the offset expected next per partition
	take := func(d transport.Delivery) {
		t.Helper()
		f := d.Message().Facts()
		if f.Offset != next[f.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", f.Partition, f.Offset, next[f.Partition])
		}
		next[f.Partition]++
		if f.Partition == 0 {
			if held = append(held, d); len(held) > 10 {
				t.Fatalf("partition 0 has %d unsettled messages, window 10", len(held))
			}
		} else if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for next[1] < each || len(held) < 10 {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive: %v (partition 1 at %d, partition 0 at %d)", err, next[1], next[0])
		}
		take(d)
	}
	if len(held) != 10 {
		t.Fatalf("partition 0 handed out %d unsettled messages, want the window of 10", len(held))
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if d, err := st.Receive(short); err == nil {
		t.Fatalf("received offset %d of partition %d with partition 0's window full", d.Message().Facts().Offset, d.Message().Facts().Partition)
	}
	for next[0] < each {
		for _, d := range held {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		held = held[:0]
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after settling: %v (partition 0 at %d)", err, next[0])
		}
		take(d)
	}
}

// TestPublishRefuses: Publish refuses, before sending anything, a message
// its consumer would not return as it was sent: a header named like the
// ID's headers, or whose name is not UTF-8 (the record would be poison).
func TestPublishRefuses(t *testing.T) {
	addrs := newCluster(t, 1)
	createTopic(t, addrs, "refuse", 1)
	tr := open(t, addrs)
	ctx := ctxT(t, 10*time.Second)
	for _, h := range []string{"ferry-id", "_watermill_message_uuid", "bad\xffname"} {
		m := &handler.Message{ID: "id-1", Topic: "refuse", Headers: map[string]string{h: "v"}}
		if err := tr.Publish(ctx, m); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("Publish with header %q: %v, want ErrInvalidMessage", h, err)
		}
		if err := tr.PublishBatch(ctx, []*handler.Message{m}); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("PublishBatch with header %q: %v, want ErrInvalidMessage", h, err)
		}
	}
	publishAll(t, tr, []*handler.Message{{ID: "ok", Topic: "refuse", Headers: map[string]string{"ferry-key": "kept", "é": "ü"}}})
	st := subscribe(t, tr, transport.Subscription{Topic: "refuse", Group: "g", StartAtOldest: true})
	if m := receive(t, st, 1)[0]; m.ID != "ok" || m.Headers["ferry-key"] != "kept" || m.Headers["é"] != "ü" || len(m.Headers) != 2 {
		t.Errorf("first message %s %v; want only the good one, its headers intact", m.ID, m.Headers)
	}
	waitCommitted(t, tr, transport.Subscription{Topic: "refuse", Group: "g", StartAtOldest: true}, 0)
}
