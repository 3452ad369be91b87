package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
	"github.com/ferrymq/ferry/transport/watermill"
)

// Tests of the Watermill-to-Ferry side that the conformance suite does not
// make: construction, Declare, what Publish refuses, the key field, and the
// lifetime of the adapter's subscription.

func subscribe(t *testing.T, s transport.Subscriber, sub transport.Subscription) transport.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := s.Subscribe(ctx, sub)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", sub.Topic, sub.Group, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = st.Close(ctx)
	})
	return st
}

func receive(t *testing.T, st transport.Stream, within time.Duration) (transport.Delivery, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return st.Receive(ctx)
}

func mustReceive(t *testing.T, st transport.Stream) transport.Delivery {
	t.Helper()
	d, err := receive(t, st, wait)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return d
}

func mustPublish(t *testing.T, p transport.Publisher, m *handler.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.Publish(ctx, m); err != nil {
		t.Fatalf("Publish(%q): %v", m.ID, err)
	}
}

// quiet fails t if st delivers anything within d.
func quiet(t *testing.T, st transport.Stream, d time.Duration, why string) {
	t.Helper()
	got, err := receive(t, st, d)
	if err == nil {
		t.Errorf("%s: got %q", why, got.Message().ID)
		_ = got.Ack(context.Background())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: Receive = %v", why, err)
	}
}

func TestNewOptionsValidated(t *testing.T) {
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	defer gc.Close()
	for _, tc := range []struct {
		name string
		opt  watermill.Option
	}{
		{"WithLogger", watermill.WithLogger(nil)},
		{"KeyField", watermill.KeyField("")},
		{"Subscribers", watermill.Subscribers(nil)},
		{"Ordering", watermill.Ordering(transport.Ordering(7))},
		{"InFlight", watermill.InFlight(-1)},
		{"MaxPayload", watermill.MaxPayload(-1)},
		{"RedeliveryDelay", watermill.RedeliveryDelay(-time.Second)},
		{"Validate", watermill.Validate(nil)},
		{"Timeout", watermill.Timeout(time.Second)},         // not New's
		{"ResendDelay", watermill.ResendDelay(time.Second)}, // not New's
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := watermill.New(context.Background(), gc, gc, tc.opt)
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("New with a bad %s = %v; want an error wrapping transport.ErrInvalidOption", tc.name, err)
			}
			if !strings.Contains(err.Error(), tc.name) {
				t.Errorf("error %q does not name %s", err, tc.name)
			}
		})
	}
	mem := newChanBridge(t)
	for _, tc := range []struct {
		name string
		make func() error
	}{
		{"NewPublisher/InFlight", func() error { _, err := watermill.NewPublisher(mem, watermill.InFlight(2)); return err }},
		{"NewPublisher/Timeout", func() error { _, err := watermill.NewPublisher(mem, watermill.Timeout(0)); return err }},
		{"NewSubscriber/Topic", func() error {
			_, err := watermill.NewSubscriber(mem, transport.Subscription{Topic: "orders"})
			return err
		}},
		{"NewSubscriber/ResendDelay", func() error {
			_, err := watermill.NewSubscriber(mem, transport.Subscription{}, watermill.ResendDelay(-1))
			return err
		}},
		{"NewSubscriber/Validate", func() error {
			_, err := watermill.NewSubscriber(mem, transport.Subscription{}, watermill.Validate(func(*message.Message) error { return nil }))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.make(); !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("= %v; want an error wrapping transport.ErrInvalidOption", err)
			}
		})
	}
}

// TestDeclare proves that Declare says, without subscribing, what the
// stream Subscribe opens declares, for each configuration the tests use,
// and refuses what Subscribe refuses.
func TestDeclare(t *testing.T) {
	eachAdapter(t, "declare", func(t *testing.T, b *watermill.Transport, topic string) {
		sub := transport.Subscription{Topic: topic, Group: "g"}
		want, err := b.Declare(sub)
		if err != nil {
			t.Fatal(err)
		}
		if got := subscribe(t, b, sub).Semantics(); got != want {
			t.Errorf("Declare = %+v\nstream declares %+v", want, got)
		}
		bad := sub
		bad.Options = map[string]string{"partitions": "4"}
		if _, err := b.Declare(bad); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare with Options = %v; want transport.ErrInvalidOption", err)
		}
		if _, err := b.Subscribe(context.Background(), bad); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Subscribe with Options = %v; want transport.ErrInvalidOption", err)
		}
		if _, err := b.Declare(transport.Subscription{Group: "g"}); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Declare without a Topic = %v; want transport.ErrInvalidOption", err)
		}
	})
}

// eachAdapter runs f on a gochannel bridge and on a watermill-sql bridge,
// each with a fresh topic (whose tables are dropped when the test ends).
func eachAdapter(t *testing.T, prefix string, f func(t *testing.T, b *watermill.Transport, topic string)) {
	pool := sqlPool(t)
	for _, a := range []struct {
		name string
		b    *watermill.Transport
	}{{"GoChannel", newChanBridge(t)}, {"SQL", newSQLBridge(t, pool)}} {
		t.Run(a.name, func(t *testing.T) {
			topic := transporttest.UniqueName(t, prefix)
			if a.name == "SQL" {
				dropTopic(t, pool, topic)
			}
			f(t, a.b, topic)
		})
	}
}

// TestPublishRefuses proves that Publish refuses, before the adapter sees
// it, what the bridge's consumer would not return byte for byte, and that
// nothing of a refused message is delivered.
func TestPublishRefuses(t *testing.T) {
	b := newChanBridge(t, watermill.MaxPayload(16), watermill.Validate(func(m *message.Message) error {
		if m.Metadata["tenant"] == "blocked" {
			return errors.New("tenant blocked")
		}
		return nil
	}))
	topic := "refuse"
	st := subscribe(t, b, transport.Subscription{Topic: topic, Group: "g"})
	for _, tc := range []struct {
		name string
		m    handler.Message
		want error
	}{
		{"key field as a header", handler.Message{ID: "a", Headers: map[string]string{watermill.DefaultKeyField: "k"}}, transport.ErrInvalidMessage},
		{"ID not UTF-8", handler.Message{ID: "a\xff"}, transport.ErrInvalidMessage},
		{"Key not UTF-8", handler.Message{ID: "a", Key: "k\xc3"}, transport.ErrInvalidMessage},
		{"header value not UTF-8", handler.Message{ID: "a", Headers: map[string]string{"h": "\xfe"}}, transport.ErrInvalidMessage},
		{"header name not UTF-8", handler.Message{ID: "a", Headers: map[string]string{"\xfe": "v"}}, transport.ErrInvalidMessage},
		{"refused by Validate", handler.Message{ID: "a", Headers: map[string]string{"tenant": "blocked"}}, transport.ErrInvalidMessage},
		{"too large", handler.Message{ID: "a", Payload: make([]byte, 17)}, transport.ErrTooLarge},
	} {
		m := tc.m
		m.Topic = topic
		err := b.Publish(context.Background(), &m)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Publish = %v; want an error wrapping %v", tc.name, err, tc.want)
		}
		if errors.Is(err, transport.ErrUnknownOutcome) {
			t.Errorf("%s: Publish = %v wraps ErrUnknownOutcome; nothing was sent", tc.name, err)
		}
	}
	if err := b.Publish(context.Background(), &handler.Message{ID: "no-topic"}); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("Publish without a Topic = %v; want transport.ErrInvalidOption", err)
	}
	quiet(t, st, 300*time.Millisecond, "a refused message was delivered")

	// At the limit, with every other field in use, a message round-trips.
	exact := &handler.Message{ID: "exact", Key: "customer:42", Topic: topic, Payload: []byte("0123456789abcdef"),
		Headers: map[string]string{"tenant": "ok", "trace": "ünïcødé"}}
	mustPublish(t, b, exact)
	d := mustReceive(t, st)
	got := d.Message()
	if got.ID != exact.ID || got.Key != exact.Key || string(got.Payload) != string(exact.Payload) ||
		fmt.Sprint(got.Headers) != fmt.Sprint(exact.Headers) {
		t.Errorf("got %+v, want %+v", got, exact)
	}
	if err := d.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestKeyField proves the mapping of Message.Key onto the metadata field
// KeyField names, both ways, with a message written by plain Watermill
// code.
func TestKeyField(t *testing.T) {
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	b, err := watermill.New(context.Background(), gc, gc, watermill.InFlight(0), watermill.KeyField("partition_key"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeConn(t, b) })
	st := subscribe(t, b, transport.Subscription{Topic: "keys", Group: "g"})
	raw, err := gc.Subscribe(context.Background(), "keys")
	if err != nil {
		t.Fatal(err)
	}

	w := message.NewMessage("evt-1", []byte("{}"))
	w.Metadata.Set("partition_key", "order-7")
	w.Metadata.Set("type", "OrderPlaced")
	if err := gc.Publish("keys", w); err != nil {
		t.Fatal(err)
	}
	d := mustReceive(t, st)
	m := d.Message()
	if m.ID != "evt-1" || m.Key != "order-7" || len(m.Headers) != 1 || m.Headers["type"] != "OrderPlaced" {
		t.Errorf("Watermill message arrived as ID %q Key %q Headers %v; want evt-1, order-7, map[type:OrderPlaced]", m.ID, m.Key, m.Headers)
	}
	_ = d.Ack(context.Background())
	<-raw // the raw subscriber's copy
	mustPublish(t, b, &handler.Message{ID: "evt-2", Key: "order-8", Topic: "keys", Headers: map[string]string{"type": "OrderPaid"}})
	select {
	case w := <-raw:
		if w.UUID != "evt-2" || w.Metadata.Get("partition_key") != "order-8" || w.Metadata.Get("type") != "OrderPaid" || len(w.Metadata) != 2 {
			t.Errorf("Ferry message arrived in Watermill as UUID %q metadata %v", w.UUID, w.Metadata)
		}
		w.Ack()
	case <-time.After(wait):
		t.Fatal("nothing reached the raw Watermill subscriber")
	}
}

// TestSubscribeContextOnlyOpens proves that the lane outlives the context
// of the Subscribe that opened it: Watermill ends a subscription, and the
// contexts of its messages, when its Subscribe context ends, so the bridge
// must not hand it the caller's.
func TestSubscribeContextOnlyOpens(t *testing.T) {
	eachAdapter(t, "ctx", func(t *testing.T, b *watermill.Transport, topic string) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := b.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(context.Background())
		mustPublish(t, b, &handler.Message{ID: "after-cancel", Topic: topic})
		d := mustReceive(t, st)
		if err := d.Ack(context.Background()); err != nil {
			t.Errorf("Ack after the Subscribe context ended = %v; want nil", err)
		}
	})
}

// TestSQLCloseCommitsAcks proves that acks given before a stream closes
// are kept: watermill-sql records acks in the transaction of its batch,
// committed when it moves on or its subscriber closes, and rolled back if
// the subscription's context ends first. So the bridge closes the
// adapter's subscriber before it cancels that context, and a new consumer
// of the group gets only what was not acked.
func TestSQLCloseCommitsAcks(t *testing.T) {
	pool := sqlPool(t)
	topic := transporttest.UniqueName(t, "commit")
	dropTopic(t, pool, topic)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	a := newSQLBridge(t, pool)
	st := subscribe(t, a, sub)
	for i := range 5 {
		mustPublish(t, a, &handler.Message{ID: fmt.Sprintf("m%d", i), Topic: topic})
	}
	for i := range 3 {
		d := mustReceive(t, st)
		if d.Message().ID != fmt.Sprintf("m%d", i) {
			t.Fatalf("got %q, want m%d", d.Message().ID, i)
		}
		if err := d.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	held := mustReceive(t, st) // m3, left unacked
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := held.Ack(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ack after Close = %v; want transport.ErrClosed", err)
	}
	b := newSQLBridge(t, pool)
	next := subscribe(t, b, sub)
	for _, want := range []string{"m3", "m4"} {
		d := mustReceive(t, next)
		if got := d.Message().ID; got != want {
			t.Errorf("the next consumer got %q, want %q (acked messages must not come again)", got, want)
		}
		_ = d.Ack(context.Background())
	}
	quiet(t, next, 300*time.Millisecond, "every message was acked")
}

// TestSQLAckDeadlineRevokes proves that a delivery whose ack deadline
// passed at the adapter (watermill-sql's AckDeadline) answers Ack with
// transport.ErrRevoked, and that the message comes again.
func TestSQLAckDeadlineRevokes(t *testing.T) {
	pool := sqlPool(t)
	topic := transporttest.UniqueName(t, "deadline")
	dropTopic(t, pool, topic)
	deadline := 300 * time.Millisecond
	b := newSQLBridgeWith(t, pool, func(c *wsql.SubscriberConfig) { c.AckDeadline = &deadline })
	st := subscribe(t, b, transport.Subscription{Topic: topic, Group: "g"})
	mustPublish(t, b, &handler.Message{ID: "slow", Topic: topic})
	d := mustReceive(t, st)
	time.Sleep(2 * deadline)
	err := d.Ack(context.Background())
	if !errors.Is(err, transport.ErrRevoked) || !errors.Is(err, watermill.ErrRevoked) {
		t.Fatalf("Ack after the ack deadline = %v; want an error wrapping transport.ErrRevoked", err)
	}
	if err := d.Ack(context.Background()); !errors.Is(err, transport.ErrSettled) {
		t.Errorf("second Ack = %v; want transport.ErrSettled", err)
	}
	again := mustReceive(t, st)
	if again.Message().ID != "slow" {
		t.Errorf("after the revoke got %q, want the message again", again.Message().ID)
	}
	if err := again.Ack(context.Background()); err != nil {
		t.Errorf("Ack of the redelivery: %v", err)
	}
}

// TestAttemptsCountedOnTheBridge proves Facts.Attempt: 1, then one more
// after each Nack, counted on the bridge (Semantics.Attempts is false).
func TestAttemptsCountedOnTheBridge(t *testing.T) {
	b := newChanBridge(t)
	st := subscribe(t, b, transport.Subscription{Topic: "attempts", Group: "g"})
	mustPublish(t, b, &handler.Message{ID: "again", Topic: "attempts"})
	for want := 1; want <= 3; want++ {
		d := mustReceive(t, st)
		if got := d.Message().Attempt(); got != want {
			t.Errorf("delivery %d has Facts.Attempt %d", want, got)
		}
		if f := d.Message().Facts(); f.Transport != watermill.Name || f.Partition != -1 || f.Offset != -1 {
			t.Errorf("Facts = %+v", f)
		}
		if want < 3 {
			if err := d.Nack(context.Background(), time.Hour); err != nil { // the delay is not honoured
				t.Fatal(err)
			}
			continue
		}
		_ = d.Ack(context.Background())
	}
}

// TestPublishBatchRuns proves PublishBatch: messages go out in order, one
// refused message fails alone, and the rest arrive.
func TestPublishBatchRuns(t *testing.T) {
	b := newChanBridge(t, watermill.MaxPayload(8))
	st1 := subscribe(t, b, transport.Subscription{Topic: "batch-1", Group: "g"})
	st2 := subscribe(t, b, transport.Subscription{Topic: "batch-2", Group: "g"})
	msgs := []*handler.Message{
		{ID: "a", Topic: "batch-1"},
		{ID: "b", Topic: "batch-1", Payload: make([]byte, 9)}, // too large
		{ID: "c", Topic: "batch-2"},
		{ID: "d", Topic: "batch-1"},
	}
	err := transport.PublishBatch(context.Background(), b, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("PublishBatch = %v; want a *transport.BatchError", err)
	}
	for i, e := range be.Errs {
		if (i == 1) != (e != nil) || (i == 1 && !errors.Is(e, transport.ErrTooLarge)) {
			t.Errorf("message %d: %v", i, e)
		}
	}
	got := map[string]bool{}
	for range 2 {
		d := mustReceive(t, st1)
		got[d.Message().ID] = true
		_ = d.Ack(context.Background())
	}
	d := mustReceive(t, st2)
	got[d.Message().ID] = true
	_ = d.Ack(context.Background())
	if !got["a"] || !got["c"] || !got["d"] || got["b"] {
		t.Errorf("delivered %v; want a, c and d", got)
	}
}

// stuckPublisher is a Watermill Publisher whose Publish blocks until
// release is closed, then returns err: an adapter whose broker hangs, or
// fails.
type stuckPublisher struct {
	release chan struct{}
	err     error
	closed  bool
}

func (p *stuckPublisher) Publish(topic string, msgs ...*message.Message) error {
	<-p.release
	return p.err
}

func (p *stuckPublisher) Close() error { p.closed = true; return nil }

// TestPublishOutcome proves that a Publish the adapter does not answer
// returns when its context ends, and that an adapter's error is reported
// as an unknown outcome: Watermill does not say whether the message was
// written.
func TestPublishOutcome(t *testing.T) {
	hung := &stuckPublisher{release: make(chan struct{})}
	defer close(hung.release)
	b, err := watermill.New(context.Background(), hung, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = b.Publish(ctx, &handler.Message{ID: "m", Topic: "t"})
	if !errors.Is(err, transport.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish to a hung adapter = %v; want ErrUnknownOutcome and context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Publish returned %v after its context ended", took)
	}

	failing := &stuckPublisher{release: make(chan struct{}), err: errors.New("connection reset")}
	close(failing.release)
	b2, err := watermill.New(context.Background(), failing, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b2.Publish(context.Background(), &handler.Message{ID: "m", Topic: "t"})
	if !errors.Is(err, transport.ErrUnknownOutcome) || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("Publish to a failing adapter = %v; want ErrUnknownOutcome with the adapter's error", err)
	}
	if _, err := b2.Subscribe(context.Background(), transport.Subscription{Topic: "t"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Subscribe on a bridge without a Subscriber = %v; want errors.ErrUnsupported", err)
	}
	if err := b2.Close(context.Background()); err != nil || !failing.closed {
		t.Errorf("Close = %v, adapter closed %t; want nil and the Publisher closed", err, failing.closed)
	}
}

// TestCloseOwnsAdapter proves that closing a handle made by Connect leaves
// the bridge working, and that closing the Transport made by New closes
// the adapter (gochannel refuses to publish after).
func TestCloseOwnsAdapter(t *testing.T) {
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	b, err := watermill.New(context.Background(), gc, gc, watermill.InFlight(0))
	if err != nil {
		t.Fatal(err)
	}
	h := b.Connect()
	hs := subscribe(t, h, transport.Subscription{Topic: "own", Group: "g"})
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Receive(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive on a closed handle's stream = %v; want transport.ErrClosed", err)
	}
	if err := h.Publish(context.Background(), &handler.Message{ID: "x", Topic: "own"}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish on a closed handle = %v; want transport.ErrClosed", err)
	}
	st := subscribe(t, b, transport.Subscription{Topic: "own", Group: "g"})
	mustPublish(t, b, &handler.Message{ID: "after-handle-close", Topic: "own"})
	d := mustReceive(t, st)
	_ = d.Ack(context.Background())
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := gc.Publish("own", message.NewMessage("y", nil)); err == nil {
		t.Error("the gochannel still publishes after the bridge closed; New owns it")
	}
	if err := b.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
}
