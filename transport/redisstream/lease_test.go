package redisstream_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// leaseQuery makes leases short: an entry is claimable after 300ms
// without a refresh, and members look every 50ms.
const leaseQuery = "?mode=shared&claim_idle=300ms&claim_interval=50ms&block=100ms"

// receiveWithin receives from st within d, or fails t.
func receiveWithin(t *testing.T, st transport.Stream, d time.Duration) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		got, err := st.Receive(ctx)
		if err == nil {
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("nothing received within %v: %v", d, err)
		}
	}
}

// nothingWithin fails t if st delivers something within d.
func nothingWithin(t *testing.T, st transport.Stream, d time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if got, err := st.Receive(ctx); err == nil {
		t.Fatalf("%s: received %q (attempt %d) within %v", why, got.Message().ID, got.Message().Attempt(), d)
	}
}

// TestMaxExtend (issue 18 item 7): the heartbeat keeps an unsettled
// entry's lease for max_extend after receipt, and no longer: once
// max_extend + claim_idle have passed without a refresh, the entry is
// taken over by the group's next XAUTOCLAIM (here the member's own) as
// attempt 2, and not before max_extend. Extend(d) keeps refreshing it
// beyond max_extend, until d.
func TestMaxExtend(t *testing.T) {
	requireShared(t)
	// Leases of a second: wide enough that a loaded machine does not delay
	// a heartbeat past claim_idle (300ms failed there once).
	const maxExtend = 1500 * time.Millisecond
	ctx := context.Background()
	subscribe := func(t *testing.T) (*redisstream.Transport, transport.Stream, string) {
		topic := uniq("maxextend")
		cleanupKeys(t, sharedAddr, topic)
		tr := open(t, "redis://"+sharedAddr+"?mode=shared&claim_idle=1s&claim_interval=100ms&block=100ms&max_extend=1500ms")
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Publish(ctx, &handler.Message{ID: "held", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		return tr, st, topic
	}

	t.Run("Cap", func(t *testing.T) {
		_, st, _ := subscribe(t)
		d := receiveWithin(t, st, 5*time.Second)
		t0 := time.Now()
		again := receiveWithin(t, st, 5*time.Second)
		took := time.Since(t0)
		if again.Message().ID != "held" || again.Message().Attempt() != 2 {
			t.Errorf("taken over: %q attempt %d; want held, attempt 2", again.Message().ID, again.Message().Attempt())
		}
		if took < maxExtend {
			t.Errorf("taken over %v after receipt; the heartbeat must hold it for max_extend (%v)", took, maxExtend)
		}
		t.Logf("held %v by the heartbeat, then taken over (max_extend %v, claim_idle 1s)", took.Round(time.Millisecond), maxExtend)
		if err := d.Ack(ctx); !errors.Is(err, transport.ErrRevoked) && err != nil {
			t.Errorf("Ack of the first delivery: %v", err)
		}
		_ = again.Ack(ctx)
	})

	t.Run("ExtendBeyond", func(t *testing.T) {
		_, st, _ := subscribe(t)
		d := receiveWithin(t, st, 5*time.Second)
		if err := d.(transport.Extender).Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		nothingWithin(t, st, 3500*time.Millisecond, "Extend(5s) must hold the entry beyond max_extend (1.5s) and claim_idle (1s)")
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack after 3.5s under Extend: %v", err)
		}
	})
}

// TestNackLongerThanClaimIdle (issue 18 item 7): Nack with a delay longer
// than claim_idle is held by the member's heartbeat: the entry comes back
// after the delay, not after claim_idle. If the member is cut off
// meanwhile, another member takes it over after claim_idle, sooner than
// asked.
func TestNackLongerThanClaimIdle(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	t.Run("Held", func(t *testing.T) {
		topic := uniq("longnack")
		cleanupKeys(t, sharedAddr, topic)
		tr := open(t, "redis://"+sharedAddr+leaseQuery)
		st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Publish(ctx, &handler.Message{ID: "later", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		d := receiveWithin(t, st, 5*time.Second)
		const delay = time.Second
		t0 := time.Now()
		if err := d.Nack(ctx, delay); err != nil {
			t.Fatal(err)
		}
		again := receiveWithin(t, st, 5*time.Second)
		took := time.Since(t0)
		if again.Message().ID != "later" || again.Message().Attempt() != 2 {
			t.Errorf("redelivered %q attempt %d; want later, attempt 2", again.Message().ID, again.Message().Attempt())
		}
		if took < delay-50*time.Millisecond {
			t.Errorf("redelivered %v after Nack(%v), with claim_idle 300ms: the delay was cut short", took, delay)
		}
		t.Logf("redelivered %v after Nack(%v)", took.Round(time.Millisecond), delay)
		_ = again.Ack(ctx)
	})
	t.Run("MemberCutOff", func(t *testing.T) {
		topic := uniq("longnack-cut")
		cleanupKeys(t, sharedAddr, topic)
		px := startProxy(t, sharedAddr)
		a := open(t, "redis://"+px.addr()+leaseQuery)
		stA, err := a.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Consumer: "member-a"})
		if err != nil {
			t.Fatal(err)
		}
		b := open(t, "redis://"+sharedAddr+leaseQuery)
		if err := b.Publish(ctx, &handler.Message{ID: "orphan", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		d := receiveWithin(t, stA, 5*time.Second)
		if err := d.Nack(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		stB, err := b.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Consumer: "member-b"})
		if err != nil {
			t.Fatal(err)
		}
		nothingWithin(t, stB, 600*time.Millisecond, "the Nacking member is alive and holds the entry")
		px.cut()
		t0 := time.Now()
		got := receiveWithin(t, stB, 5*time.Second)
		if got.Message().ID != "orphan" {
			t.Errorf("got %q, want orphan", got.Message().ID)
		}
		t.Logf("taken over %v after the Nacking member was cut off (Nack 10s, claim_idle 300ms)", time.Since(t0).Round(time.Millisecond))
		_ = got.Ack(ctx)
		px.restore() // so that the cut-off member can close
	})
}

// TestGroupRecreated (issue 18 item 7): when the stream and its group
// vanish (deleted, or Redis restarted without its data), the consumer's
// read fails with NOGROUP, once reported to the caller, and the consumer
// creates the group again from the start of the new stream: what is
// published afterwards is delivered, in order, each once.
func TestGroupRecreated(t *testing.T) {
	requireShared(t)
	topic := uniq("nogroup")
	cleanupKeys(t, sharedAddr, topic)
	tr := open(t, "redis://"+sharedAddr+"?"+fast)
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &handler.Message{ID: "before", Topic: topic, Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if d := receiveWithin(t, st, 5*time.Second); d.Message().ID != "before" {
		t.Fatalf("got %q", d.Message().ID)
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Client().Del(ctx, topic).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"after-1", "after-2", "after-3"} {
		if err := tr.Publish(ctx, &handler.Message{ID: id, Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	errs := 0
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for len(got) < 3 {
		d, err := st.Receive(rctx)
		if rctx.Err() != nil {
			t.Fatalf("received %v within 15s (%d errors): the group was not created again", got, errs)
		}
		if err != nil {
			if errors.Is(err, transport.ErrClosed) {
				t.Fatal(err)
			}
			if errs == 0 {
				t.Logf("the read after the stream vanished: %v", err)
			}
			errs++
			time.Sleep(50 * time.Millisecond) // the caller's backoff
			continue
		}
		got = append(got, d.Message().ID)
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != "after-1" || got[1] != "after-2" || got[2] != "after-3" {
		t.Errorf("received %v; want after-1, after-2, after-3", got)
	}
	if errs == 0 {
		t.Error("the NOGROUP read was never reported")
	}
	nothingWithin(t, st, 500*time.Millisecond, "every entry was acked")
}

// TestHandoverWaitsForInFlight: a member hands a stream over only once
// nothing of it is in flight. A holds an entry unacked when B joins and
// the stream is assigned to B (its name sorts first): B receives nothing
// while A still holds it, across several lease ticks; once A acks, B takes
// the stream over and receives the rest, in order, and the held entry
// never again. Redis's kin of Kafka's "commit past unfinished work".
func TestHandoverWaitsForInFlight(t *testing.T) {
	requireShared(t)
	topic := uniq("inflight")
	cleanupKeys(t, sharedAddr, topic)
	url := "redis://" + sharedAddr + "?" + fast
	ctx := context.Background()
	pub := open(t, url)
	stA, err := open(t, url).Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Consumer: "member-b"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := pub.Publish(ctx, &handler.Message{ID: "m-" + strconv.Itoa(i), Key: "k", Topic: topic, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	held := receiveWithin(t, stA, 5*time.Second)
	if held.Message().ID != "m-0" {
		t.Fatalf("A received %q first", held.Message().ID)
	}
	stB, err := open(t, url).Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Consumer: "member-a"})
	if err != nil {
		t.Fatal(err)
	}
	nothingWithin(t, stB, 1500*time.Millisecond, "A still holds m-0 unacked: the stream must not change hands")
	if err := held.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// A may still hand out what it had read ahead before it lets go; B
	// takes the rest. Together: m-1 … m-4 once each, in order.
	var got []string
	collect := func(st transport.Stream, d time.Duration) {
		for len(got) < 4 {
			c, cancel := context.WithTimeout(ctx, d)
			del, err := st.Receive(c)
			cancel()
			if err != nil {
				return
			}
			got = append(got, del.Message().ID)
			if err := del.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	collect(stA, 300*time.Millisecond)
	collect(stB, 3*time.Second)
	if strings.Join(got, " ") != "m-1 m-2 m-3 m-4" {
		t.Errorf("after the handover: %v; want m-1 m-2 m-3 m-4, each once, in order", got)
	}
}
