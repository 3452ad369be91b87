package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// wait bounds every blocking step of a test.
const wait = 5 * time.Second

func pub(t testing.TB, p transport.Publisher, topic, key, id string) {
	t.Helper()
	m := &handler.Message{ID: id, Key: key, Topic: topic, Payload: []byte("payload " + id)}
	if err := p.Publish(context.Background(), m); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

func sub(t testing.TB, s transport.Subscriber, topic, group, consumer string, oldest bool) transport.Stream {
	t.Helper()
	st, err := s.Subscribe(context.Background(), transport.Subscription{
		Topic: topic, Group: group, Consumer: consumer, StartAtOldest: oldest,
	})
	if err != nil {
		t.Fatalf("subscribe %s/%s/%s: %v", topic, group, consumer, err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

func recv(t testing.TB, s transport.Stream) transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	d, err := s.Receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return d
}

// quiet asserts that s delivers nothing within d.
func quiet(t testing.TB, s transport.Stream, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if got, err := s.Receive(ctx); err == nil {
		m := got.Message()
		t.Fatalf("unexpected delivery %s (partition %d offset %d attempt %d)", m.ID, m.Facts().Partition, m.Facts().Offset, m.Attempt())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive: %v, want deadline exceeded", err)
	}
}

func ack(t testing.TB, d transport.Delivery) {
	t.Helper()
	if err := d.Ack(context.Background()); err != nil {
		t.Fatalf("ack %s: %v", d.Message().ID, err)
	}
}

func testBroker(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	b := mustNew(t, opts...)
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

func mustNew(t testing.TB, opts ...Option) *Transport {
	t.Helper()
	b, err := New(context.Background(), "memory://", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keyFor returns a key that hashes to partition p of n.
func keyFor(p, n int) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if int(fnv1a(k)%uint32(n)) == p {
			return k
		}
	}
}

func TestPartitionByKey(t *testing.T) {
	b := testBroker(t, Partitions(8))
	s := sub(t, b, "orders", "g", "", false)
	keys := []string{"order-1", "order-2", "order-3", "customer-42", "sku-9"}
	for i := range 50 {
		pub(t, b, "orders", keys[i%len(keys)], "m"+strconv.Itoa(i))
	}
	for i := range 16 {
		pub(t, b, "orders", "", "nokey"+strconv.Itoa(i))
	}
	partOf := map[string]int32{}
	keyless := map[int32]int{}
	for range 66 {
		d := recv(t, s)
		m := d.Message()
		f := m.Facts()
		if m.Key == "" {
			keyless[f.Partition]++
		} else {
			if want := int32(fnv1a(m.Key) % 8); f.Partition != want {
				t.Fatalf("key %s in partition %d, want %d", m.Key, f.Partition, want)
			}
			if p, ok := partOf[m.Key]; ok && p != f.Partition {
				t.Fatalf("key %s in partitions %d and %d", m.Key, p, f.Partition)
			}
			partOf[m.Key] = f.Partition
		}
		if f.Transport != "memory" || f.BrokerID != fmt.Sprintf("%d/%d", f.Partition, f.Offset) || f.Attempt != 1 ||
			f.PublishedAt.IsZero() || f.ReceivedAt.Before(f.PublishedAt) || m.Topic != "orders" {
			t.Fatalf("bad facts %+v topic %q", f, m.Topic)
		}
		ack(t, d)
	}
	if len(partOf) != len(keys) {
		t.Fatalf("saw %d keys", len(partOf))
	}
	for p := range int32(8) {
		if keyless[p] != 2 {
			t.Fatalf("keyless messages per partition %v, want 2 each (round-robin)", keyless)
		}
	}
	quiet(t, s, 20*time.Millisecond)
}

func TestOrderPerPartitionAndFairness(t *testing.T) {
	b := testBroker(t, Partitions(4))
	s := sub(t, b, "orders", "g", "", false)
	const n = 2000
	for i := range n {
		pub(t, b, "orders", "key"+strconv.Itoa(i%37), strconv.Itoa(i))
	}
	lastOffset := map[int32]int64{}
	lastSeq := map[string]int{}
	var first []int32
	for i := range n {
		d := recv(t, s)
		m := d.Message()
		f := m.Facts()
		if i < 4 {
			first = append(first, f.Partition)
		}
		if last, ok := lastOffset[f.Partition]; ok && f.Offset != last+1 {
			t.Fatalf("partition %d: offset %d after %d", f.Partition, f.Offset, last)
		}
		lastOffset[f.Partition] = f.Offset
		seq, _ := strconv.Atoi(m.ID)
		if last, ok := lastSeq[m.Key]; ok && seq <= last {
			t.Fatalf("key %s: message %d after %d", m.Key, seq, last)
		}
		lastSeq[m.Key] = seq
		ack(t, d)
	}
	slices.Sort(first)
	if !slices.Equal(first, []int32{0, 1, 2, 3}) {
		t.Fatalf("first four deliveries from partitions %v, want one from each (round-robin)", first)
	}
}

func TestEveryGroupGetsEverything(t *testing.T) {
	b := testBroker(t)
	inv := sub(t, b, "orders", "inventory", "", false)
	email := sub(t, b, "orders", "email", "", false)
	const n = 300
	for i := range n {
		pub(t, b, "orders", "k"+strconv.Itoa(i%10), strconv.Itoa(i))
	}
	for _, s := range []transport.Stream{inv, email} {
		seen := map[string]bool{}
		for range n {
			d := recv(t, s)
			if seen[d.Message().ID] {
				t.Fatalf("duplicate %s", d.Message().ID)
			}
			seen[d.Message().ID] = true
			ack(t, d)
		}
		quiet(t, s, 10*time.Millisecond)
	}
}

func TestMembersSplitPartitions(t *testing.T) {
	b := testBroker(t, Partitions(8))
	sa := sub(t, b, "orders", "inventory", "a", false)
	sb := sub(t, b, "orders", "inventory", "b", false)
	const n = 400
	for i := range n {
		pub(t, b, "orders", "k"+strconv.Itoa(i), strconv.Itoa(i))
	}
	type got struct {
		ids   []string
		parts map[int32]bool
	}
	results := make([]got, 2)
	var total sync.WaitGroup
	var mu sync.Mutex
	count := 0
	done := make(chan struct{})
	for i, s := range []transport.Stream{sa, sb} {
		total.Add(1)
		go func() {
			defer total.Done()
			r := got{parts: map[int32]bool{}}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			for {
				d, err := s.Receive(ctx)
				if err != nil {
					break
				}
				r.ids = append(r.ids, d.Message().ID)
				r.parts[d.Message().Facts().Partition] = true
				d.Ack(ctx)
				mu.Lock()
				count++
				if count == n {
					close(done)
				}
				mu.Unlock()
			}
			results[i] = r
		}()
	}
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("timed out")
	}
	sa.Close(context.Background())
	sb.Close(context.Background())
	total.Wait()
	// a and b are sorted by name: a owns the even partitions, b the odd.
	for p := range results[0].parts {
		if p%2 != 0 || results[1].parts[p] {
			t.Fatalf("member a got partition %d", p)
		}
	}
	for p := range results[1].parts {
		if p%2 != 1 {
			t.Fatalf("member b got partition %d", p)
		}
	}
	all := append(slices.Clone(results[0].ids), results[1].ids...)
	slices.Sort(all)
	if len(all) != n || len(slices.Compact(all)) != n {
		t.Fatalf("got %d deliveries, %d distinct, want %d", len(results[0].ids)+len(results[1].ids), len(slices.Compact(all)), n)
	}
	if len(results[0].ids) == 0 || len(results[1].ids) == 0 {
		t.Fatalf("work not shared: %d and %d", len(results[0].ids), len(results[1].ids))
	}
}

func TestNackDelayRedelivers(t *testing.T) {
	b := testBroker(t, Partitions(1))
	s := sub(t, b, "orders", "g", "", false)
	pub(t, b, "orders", "o1", "first")
	d := recv(t, s)
	nacked := time.Now()
	const delay = 80 * time.Millisecond
	if err := d.Nack(context.Background(), delay); err != nil {
		t.Fatal(err)
	}
	// A later message of the same partition and key is not held back.
	pub(t, b, "orders", "o1", "second")
	d2 := recv(t, s)
	if d2.Message().ID != "second" || d2.Message().Attempt() != 1 {
		t.Fatalf("got %s attempt %d, want second attempt 1", d2.Message().ID, d2.Message().Attempt())
	}
	ack(t, d2)
	d3 := recv(t, s)
	if waited := time.Since(nacked); waited < delay {
		t.Fatalf("redelivered after %v, before the %v delay", waited, delay)
	}
	m := d3.Message()
	if m.ID != "first" || m.Attempt() != 2 || m.Facts().Offset != 0 || string(m.Payload) != "payload first" {
		t.Fatalf("redelivery %s attempt %d offset %d", m.ID, m.Attempt(), m.Facts().Offset)
	}
	// Nack without delay comes back at once, attempt 3.
	if err := d3.Nack(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	d4 := recv(t, s)
	if d4.Message().ID != "first" || d4.Message().Attempt() != 3 {
		t.Fatalf("got %s attempt %d", d4.Message().ID, d4.Message().Attempt())
	}
	ack(t, d4)
	quiet(t, s, 20*time.Millisecond)
}

func TestSettleTwice(t *testing.T) {
	b := testBroker(t)
	s := sub(t, b, "orders", "g", "", false)
	pub(t, b, "orders", "k", "1")
	pub(t, b, "orders", "k", "2")
	d := recv(t, s)
	ack(t, d)
	if err := d.Ack(context.Background()); !errors.Is(err, transport.ErrSettled) {
		t.Fatalf("second ack: %v", err)
	}
	if err := d.Nack(context.Background(), 0); !errors.Is(err, transport.ErrSettled) {
		t.Fatalf("nack after ack: %v", err)
	}
	d = recv(t, s)
	if err := d.Nack(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(context.Background()); !errors.Is(err, transport.ErrSettled) {
		t.Fatalf("ack after nack: %v", err)
	}
	quiet(t, s, 20*time.Millisecond) // the hour-long Nack is not redelivered, the acked one never
}

func TestCloseRedeliversToOtherMember(t *testing.T) {
	b := testBroker(t, Partitions(4))
	sa := sub(t, b, "orders", "g", "a", false)
	sb := sub(t, b, "orders", "g", "b", false)
	const n = 200
	for i := range n {
		pub(t, b, "orders", "k"+strconv.Itoa(i), strconv.Itoa(i))
	}
	// a takes all of its messages and settles none; b takes and acks its own.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	var held []transport.Delivery
	for {
		d, err := sa.Receive(ctx)
		if err != nil {
			break
		}
		held = append(held, d)
	}
	cancel()
	seen := map[string]int{}
	for len(seen) < n-len(held) {
		d := recv(t, sb)
		seen[d.Message().ID]++
		ack(t, d)
	}
	if len(held) == 0 {
		t.Fatal("member a received nothing")
	}
	if err := sa.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Receive(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("receive after close: %v", err)
	}
	var lastOffset = map[int32]int64{}
	for range held {
		d := recv(t, sb)
		m := d.Message()
		if m.Attempt() != 2 {
			t.Fatalf("%s redelivered with attempt %d, want 2", m.ID, m.Attempt())
		}
		f := m.Facts()
		if last, ok := lastOffset[f.Partition]; ok && f.Offset <= last {
			t.Fatalf("redeliveries out of order in partition %d: %d after %d", f.Partition, f.Offset, last)
		}
		lastOffset[f.Partition] = f.Offset
		seen[m.ID]++
		ack(t, d)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s received %d times by b", id, c)
		}
	}
	// The closed member's late settles change nothing.
	if err := held[0].Ack(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("late ack: %v, want ErrClosed", err)
	}
	if err := held[0].Ack(context.Background()); !errors.Is(err, transport.ErrSettled) {
		t.Fatalf("second late ack: %v, want ErrSettled", err)
	}
	if err := held[1].Nack(context.Background(), 0); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("late nack: %v, want ErrClosed", err)
	}
	quiet(t, sb, 20*time.Millisecond)
	lag, err := b.Lag(context.Background(), transport.Subscription{Topic: "orders", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lag {
		if l.Messages != 0 {
			t.Fatalf("lag %+v after everything was acked", lag)
		}
	}
}

func TestJoinRevokesMovedPartition(t *testing.T) {
	b := testBroker(t, Partitions(2))
	sa := sub(t, b, "orders", "g", "a", false)
	pub(t, b, "orders", keyFor(0, 2), "p0")
	pub(t, b, "orders", keyFor(1, 2), "p1")
	d0, d1 := recv(t, sa), recv(t, sa)
	if d0.Message().Facts().Partition != 0 {
		d0, d1 = d1, d0
	}
	sb := sub(t, b, "orders", "g", "b", false) // b takes partition 1
	if err := d1.Ack(context.Background()); !errors.Is(err, ErrRevoked) {
		t.Fatalf("ack of moved partition: %v, want ErrRevoked", err)
	}
	ack(t, d0) // partition 0 stayed with a
	d := recv(t, sb)
	if d.Message().ID != "p1" || d.Message().Attempt() != 2 {
		t.Fatalf("b got %s attempt %d, want p1 attempt 2", d.Message().ID, d.Message().Attempt())
	}
	ack(t, d)
	quiet(t, sa, 20*time.Millisecond)
	quiet(t, sb, 20*time.Millisecond)
}

func TestNackedMessageFollowsPartition(t *testing.T) {
	b := testBroker(t, Partitions(2))
	sa := sub(t, b, "orders", "g", "a", false)
	pub(t, b, "orders", keyFor(1, 2), "m")
	d := recv(t, sa)
	if err := d.Nack(context.Background(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sb := sub(t, b, "orders", "g", "b", false)
	got := recv(t, sb)
	if got.Message().ID != "m" || got.Message().Attempt() != 2 {
		t.Fatalf("got %s attempt %d", got.Message().ID, got.Message().Attempt())
	}
	ack(t, got)
	quiet(t, sa, 20*time.Millisecond)
}

func TestRetentionAndStartAtOldest(t *testing.T) {
	b := testBroker(t, Partitions(1), Retention(5))
	live := sub(t, b, "orders", "live", "", false)
	for i := range 10 {
		pub(t, b, "orders", "k", strconv.Itoa(i))
		ack(t, recv(t, live)) // the live group keeps up
	}
	late := sub(t, b, "orders", "late", "", false)
	replay := sub(t, b, "orders", "replay", "", true)
	// A new group with StartAtOldest replays the 5 retained messages.
	for i := 5; i < 10; i++ {
		d := recv(t, replay)
		if d.Message().ID != strconv.Itoa(i) || d.Message().Facts().Offset != int64(i) {
			t.Fatalf("got %s offset %d, want %d", d.Message().ID, d.Message().Facts().Offset, i)
		}
		ack(t, d)
	}
	quiet(t, replay, 20*time.Millisecond)
	quiet(t, late, 20*time.Millisecond) // a new group starts at the end
	pub(t, b, "orders", "k", "10")
	for _, s := range []transport.Stream{live, late, replay} {
		if d := recv(t, s); d.Message().ID != "10" {
			t.Fatalf("got %s, want 10", d.Message().ID)
		}
	}
	// StartAtOldest is ignored for a group that exists.
	late2 := sub(t, b, "orders", "late", "second", true)
	quiet(t, late2, 20*time.Millisecond)
}

func TestRetentionNeverDropsUnreceived(t *testing.T) {
	b := testBroker(t, Partitions(1), Retention(3))
	slow := sub(t, b, "orders", "slow", "", false)
	for i := range 10 {
		pub(t, b, "orders", "k", strconv.Itoa(i))
	}
	slow.Close(context.Background()) // a group without members still holds its messages
	slow = sub(t, b, "orders", "slow", "", false)
	for i := range 10 {
		d := recv(t, slow)
		if d.Message().ID != strconv.Itoa(i) {
			t.Fatalf("got %s, want %d", d.Message().ID, i)
		}
		ack(t, d)
	}
	// Once the group has received them, the log shrinks to retention on the
	// next publish.
	pub(t, b, "orders", "k", "10")
	replay := sub(t, b, "orders", "replay", "", true)
	for _, want := range []string{"8", "9", "10"} {
		if d := recv(t, replay); d.Message().ID != want {
			t.Fatalf("replay got %s, want %s", d.Message().ID, want)
		}
	}
	quiet(t, replay, 20*time.Millisecond)
}

func TestRetainedDeliveryStillRedelivered(t *testing.T) {
	b := testBroker(t, Partitions(1), Retention(2))
	s := sub(t, b, "orders", "g", "", false)
	pub(t, b, "orders", "k", "0")
	d := recv(t, s)
	for i := 1; i <= 5; i++ { // push message 0 out of the log
		pub(t, b, "orders", "k", strconv.Itoa(i))
	}
	if err := d.Nack(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	got := recv(t, s)
	if got.Message().ID != "0" || got.Message().Attempt() != 2 || string(got.Message().Payload) != "payload 0" {
		t.Fatalf("got %s attempt %d", got.Message().ID, got.Message().Attempt())
	}
}

func TestReceiveCancel(t *testing.T) {
	b := testBroker(t)
	s := sub(t, b, "orders", "g", "", false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Receive(ctx)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Receive block
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("receive: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("took %v to return", d)
		}
	case <-time.After(wait):
		t.Fatal("Receive did not return after cancel")
	}
	// A cancelled ctx wins even when messages are ready.
	pub(t, b, "orders", "k", "1")
	if _, err := s.Receive(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("receive with cancelled ctx: %v", err)
	}
	if d := recv(t, s); d.Message().ID != "1" {
		t.Fatalf("got %s", d.Message().ID)
	}
}

func TestCloseUnblocksReceive(t *testing.T) {
	b := testBroker(t)
	s := sub(t, b, "orders", "g", "", false)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Receive(context.Background())
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("receive: %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Receive did not return after Close")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestBrokerClose(t *testing.T) {
	b := mustNew(t)
	s := sub(t, b, "orders", "g", "", false)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Receive(context.Background())
		errc <- err
	}()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("receive: %v", err)
	}
	err := b.Publish(context.Background(), &handler.Message{Topic: "orders"})
	if !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if _, err := b.Subscribe(context.Background(), transport.Subscription{Topic: "orders"}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if _, err := b.Connect().Subscribe(context.Background(), transport.Subscription{Topic: "orders"}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("subscribe on a Conn after close: %v", err)
	}
}

func TestPublishStoresACopy(t *testing.T) {
	b := testBroker(t)
	s := sub(t, b, "orders", "g", "", false)
	buf := []byte("original")
	hdr := map[string]string{"h": "v"}
	m := &handler.Message{ID: "1", Topic: "orders", Payload: buf, Headers: hdr}
	if err := b.Publish(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	copy(buf, "CHANGED!")
	hdr["h"] = "changed"
	hdr["x"] = "new"
	got := recv(t, s).Message()
	if string(got.Payload) != "original" || len(got.Headers) != 1 || got.Headers["h"] != "v" {
		t.Fatalf("stored message changed with the publisher's buffers: %q %v", got.Payload, got.Headers)
	}
}

func TestTooLarge(t *testing.T) {
	b := testBroker(t, MaxPayload(10), Partitions(1))
	if b.Semantics().MaxPayload != 10 {
		t.Fatalf("Semantics.MaxPayload = %d", b.Semantics().MaxPayload)
	}
	s := sub(t, b, "orders", "g", "", false)
	err := b.Publish(context.Background(), &handler.Message{ID: "big", Topic: "orders", Payload: make([]byte, 11)})
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("publish: %v, want ErrTooLarge", err)
	}
	if want := "payload of 11 bytes over the limit of 10"; !contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if err := b.Publish(context.Background(), &handler.Message{ID: "ok", Topic: "orders", Payload: make([]byte, 10)}); err != nil {
		t.Fatal(err)
	}
	if d := recv(t, s); d.Message().ID != "ok" || d.Message().Facts().Offset != 0 {
		t.Fatalf("got %s at %d", d.Message().ID, d.Message().Facts().Offset)
	}
	if sem := mustNew(t).Semantics(); sem.MaxPayload != DefaultMaxPayload {
		t.Fatalf("default MaxPayload %d", sem.MaxPayload)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestPublishBatch(t *testing.T) {
	b := testBroker(t, MaxPayload(4), Partitions(2))
	s := sub(t, b, "orders", "g", "", false)
	msgs := []*handler.Message{
		{ID: "1", Key: "a", Topic: "orders"},
		{ID: "2", Key: "a", Topic: "orders"},
		{ID: "big", Key: "a", Topic: "orders", Payload: []byte("toolarge")},
		{ID: "3", Key: "b", Topic: "orders"},
		{ID: "4", Key: "a", Topic: "orders"},
		{ID: "none"},
	}
	err := b.PublishBatch(context.Background(), msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(msgs) {
		t.Fatalf("PublishBatch: %v", err)
	}
	for i, e := range be.Errs {
		if bad := i == 2 || i == 5; bad != (e != nil) {
			t.Fatalf("message %d: error %v", i, e)
		}
	}
	if !errors.Is(be.Errs[2], transport.ErrTooLarge) {
		t.Fatalf("errs[2] = %v", be.Errs[2])
	}
	var ofA []string
	for range 4 {
		d := recv(t, s)
		if d.Message().Key == "a" {
			ofA = append(ofA, d.Message().ID)
		}
		ack(t, d)
	}
	if !slices.Equal(ofA, []string{"1", "2", "4"}) {
		t.Fatalf("key a in order %v", ofA)
	}
	if err := b.PublishBatch(context.Background(), msgs[:2]); err != nil {
		t.Fatalf("clean batch: %v", err)
	}
	if err := transport.PublishBatch(context.Background(), b, msgs[3:4]); err != nil {
		t.Fatal(err)
	}
}

func TestDLQ(t *testing.T) {
	b := testBroker(t)
	ctx := context.Background()
	inv := sub(t, b, "inventory", "inventory", "", false)
	dlqWatch := sub(t, b, "inventory.dlq", "watch", "", false)
	for i := range 5 {
		m := &handler.Message{
			ID: "e" + strconv.Itoa(i), Key: "order-" + strconv.Itoa(i%2), Topic: "inventory.dlq",
			Payload: []byte("body" + strconv.Itoa(i)),
			Headers: map[string]string{
				"app":                          "x",
				transport.HeaderError:          "boom",
				transport.HeaderOriginalTopic:  "inventory",
				transport.HeaderAttempts:       "3",
				transport.HeaderOriginalOffset: "7",
			},
		}
		if err := b.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	list, err := b.ListDLQ(ctx, "inventory.dlq", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
		if m.Headers[transport.HeaderError] != "boom" || m.Facts().Transport != Scheme {
			t.Fatalf("listed message lost its dead-letter headers or facts: %v %+v", m.Headers, m.Facts())
		}
	}
	if !slices.Equal(ids, []string{"e0", "e1", "e2", "e3", "e4"}) {
		t.Fatalf("ListDLQ order %v", ids)
	}
	if l, _ := b.ListDLQ(ctx, "inventory.dlq", 2); len(l) != 2 || l[0].ID != "e0" || l[1].ID != "e1" {
		t.Fatalf("ListDLQ limit 2: %d", len(l))
	}
	if l, err := b.ListDLQ(ctx, "nothing.dlq", 0); err != nil || len(l) != 0 {
		t.Fatalf("missing DLQ: %v %v", l, err)
	}
	list[0].Payload[0] = 'X' // the listing is the caller's own copy
	// A group watching the DLQ topic takes one message now, the rest later.
	w0 := recv(t, dlqWatch)

	n, err := b.ReplayDLQ(ctx, "inventory.dlq", transport.Replay{IDs: []string{"e1"}, Keys: []string{"order-0"}, Limit: 2})
	if err != nil || n != 2 {
		t.Fatalf("ReplayDLQ = %d, %v; want 2", n, err)
	}
	var replayed []string
	for range 2 {
		d := recv(t, inv)
		m := d.Message()
		replayed = append(replayed, m.ID)
		if string(m.Payload) != "body"+m.ID[1:] || m.Topic != "inventory" {
			t.Fatalf("replayed %s %q to %s", m.ID, m.Payload, m.Topic)
		}
		if len(m.Headers) != 1 || m.Headers["app"] != "x" {
			t.Fatalf("replayed headers %v, want only the original ones", m.Headers)
		}
		ack(t, d)
	}
	slices.Sort(replayed)
	if !slices.Equal(replayed, []string{"e0", "e1"}) { // the oldest two selected
		t.Fatalf("replayed %v", replayed)
	}
	quiet(t, inv, 20*time.Millisecond)
	list, _ = b.ListDLQ(ctx, "inventory.dlq", 0)
	ids = ids[:0]
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"e2", "e3", "e4"}) {
		t.Fatalf("after replay the DLQ holds %v", ids)
	}
	// The watcher's outstanding delivery can still be acked; removed
	// messages it had not received are skipped.
	ack(t, w0)
	rest := 3 // e2, e3, e4
	if w0.Message().ID >= "e2" {
		rest = 2 // w0 was one of them
	}
	var watched []string
	for range rest {
		d := recv(t, dlqWatch)
		watched = append(watched, d.Message().ID)
		ack(t, d)
	}
	watched = append(watched, w0.Message().ID)
	slices.Sort(watched)
	want := slices.Compact(slices.Sorted(slices.Values([]string{w0.Message().ID, "e2", "e3", "e4"})))
	if !slices.Equal(watched, want) {
		t.Fatalf("watcher got %v, want %v", watched, want)
	}
	quiet(t, dlqWatch, 20*time.Millisecond)

	// To another topic, everything that is left.
	other := sub(t, b, "inventory.retry", "g", "", false)
	n, err = b.ReplayDLQ(ctx, "inventory.dlq", transport.Replay{To: "inventory.retry"})
	if err != nil || n != 3 {
		t.Fatalf("ReplayDLQ all = %d, %v", n, err)
	}
	for range 3 {
		ack(t, recv(t, other))
	}
	if l, _ := b.ListDLQ(ctx, "inventory.dlq", 0); len(l) != 0 {
		t.Fatalf("DLQ not empty: %d", len(l))
	}
	lag, err := b.Lag(ctx, transport.Subscription{Topic: "inventory.dlq", Group: "watch"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lag {
		if l.Messages != 0 {
			t.Fatalf("DLQ watcher lag %+v", lag)
		}
	}

	// A message with no destination stops the replay and stays.
	pub(t, b, "orphans.dlq", "", "lost")
	if n, err := b.ReplayDLQ(ctx, "orphans.dlq", transport.Replay{}); err == nil || n != 0 {
		t.Fatalf("replay without destination: %d, %v", n, err)
	}
	if l, _ := b.ListDLQ(ctx, "orphans.dlq", 0); len(l) != 1 {
		t.Fatalf("orphan removed")
	}
}

func TestLag(t *testing.T) {
	b := testBroker(t, Partitions(2))
	ctx := context.Background()
	s := sub(t, b, "orders", "g", "", false)
	k0 := keyFor(0, 2)
	for i := range 10 {
		pub(t, b, "orders", k0, strconv.Itoa(i))
	}
	time.Sleep(5 * time.Millisecond)
	ds := []transport.Delivery{recv(t, s), recv(t, s), recv(t, s)}
	ack(t, ds[1])
	if err := ds[2].Nack(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	lag, err := b.Lag(ctx, transport.Subscription{Topic: "orders", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lag) != 2 || lag[0].Partition != "0" || lag[0].Messages != 9 || lag[1].Partition != "1" || lag[1].Messages != 0 {
		t.Fatalf("lag %+v, want 9 on partition 0, 0 on 1", lag)
	}
	if lag[0].OldestAge < 5*time.Millisecond || lag[0].OldestAge > wait || lag[1].OldestAge != 0 {
		t.Fatalf("oldest ages %v %v", lag[0].OldestAge, lag[1].OldestAge)
	}
	// Consumed counts what is settled: one acked; the Nacked one waits.
	if n, err := b.Consumed(ctx, transport.Subscription{Topic: "orders", Group: "g"}); err != nil || n != 1 {
		t.Fatalf("consumed %d, %v; want 1", n, err)
	}
	ack(t, ds[0])
	lag, _ = b.Lag(ctx, transport.Subscription{Topic: "orders", Group: "g"})
	if lag[0].Messages != 8 {
		t.Fatalf("lag %+v after one more ack", lag)
	}
	if n, err := b.Consumed(ctx, transport.Subscription{Topic: "orders", Group: "g"}); err != nil || n != 2 {
		t.Fatalf("consumed %d, %v after one more ack; want 2", n, err)
	}
	if _, err := b.Lag(ctx, transport.Subscription{Topic: "orders", Group: "nope"}); err == nil {
		t.Fatal("lag of a missing group")
	}
	if _, err := b.Lag(ctx, transport.Subscription{Topic: "nope", Group: "g"}); err == nil {
		t.Fatal("lag of a missing topic")
	}
}

func TestPrivateGroups(t *testing.T) {
	b := testBroker(t, Partitions(2))
	s1 := sub(t, b, "orders", "", "", false)
	s2 := sub(t, b, "orders", "", "", false)
	pub(t, b, "orders", "", "1")
	pub(t, b, "orders", "", "2")
	for _, s := range []transport.Stream{s1, s2} {
		got := []string{recv(t, s).Message().ID, recv(t, s).Message().ID}
		slices.Sort(got)
		if !slices.Equal(got, []string{"1", "2"}) {
			t.Fatalf("private group got %v", got)
		}
	}
	s1.Close(context.Background())
	tp := b.b.lookup("orders")
	for _, p := range tp.parts {
		p.mu.Lock()
		n := len(p.gps)
		p.mu.Unlock()
		if n != 1 {
			t.Fatalf("partition %d has %d groups after a private stream closed, want 1", p.index, n)
		}
	}
}

func TestSubscribeErrors(t *testing.T) {
	b := testBroker(t)
	ctx := context.Background()
	sub(t, b, "orders", "g", "a", false)
	if _, err := b.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "g", Consumer: "a"}); !errors.Is(err, transport.ErrInvalidOption) {
		t.Fatalf("duplicate consumer: %v", err)
	}
	_, err := b.Subscribe(ctx, transport.Subscription{Topic: "orders", Options: map[string]string{"prefetch": "10"}})
	if !errors.Is(err, transport.ErrInvalidOption) || !contains(err.Error(), "prefetch") {
		t.Fatalf("unknown option: %v", err)
	}
	if _, err := b.Subscribe(ctx, transport.Subscription{}); !errors.Is(err, transport.ErrInvalidOption) {
		t.Fatalf("no topic: %v", err)
	}
	if err := b.Publish(ctx, &handler.Message{ID: "x"}); err == nil {
		t.Fatal("publish without topic")
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Option{Partitions(0), Partitions(1 << 20), Retention(-1), MaxPayload(-5), nil} {
		b, err := New(context.Background(), "memory://", o)
		if !errors.Is(err, transport.ErrInvalidOption) || b != nil {
			t.Fatalf("New(%v) = %v, %v", o, b, err)
		}
	}
	// Options given to New override the URL's.
	b, err := New(context.Background(), "memory://?partitions=2", Partitions(3), Retention(0), MaxPayload(0))
	if err != nil {
		t.Fatal(err)
	}
	if b.b.cfg.partitions != 3 {
		t.Fatalf("partitions %d, want the option's 3", b.b.cfg.partitions)
	}
	if _, err := New(context.Background(), "redis://x"); !errors.Is(err, transport.ErrInvalidOption) {
		t.Fatalf("another scheme: %v", err)
	}
}

func TestConnCloseIsLocal(t *testing.T) {
	b := testBroker(t, Partitions(1))
	c1, c2 := b.Connect(), b.Connect()
	sa := sub(t, c1, "orders", "g", "a", false)
	sb := sub(t, c2, "orders", "g", "b", false)
	pub(t, c2, "orders", "k", "1")
	d := recv(t, sa) // a owns the only partition
	if err := c1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Receive(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("stream of a closed Conn: %v", err)
	}
	if err := c1.Publish(context.Background(), &handler.Message{Topic: "orders"}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish on closed Conn: %v", err)
	}
	if err := d.Ack(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("ack after Conn close: %v", err)
	}
	if got := recv(t, sb); got.Message().ID != "1" || got.Message().Attempt() != 2 {
		t.Fatalf("b got %s attempt %d", got.Message().ID, got.Message().Attempt())
	}
	pub(t, c2, "orders", "k", "2")
	if got := recv(t, sb); got.Message().ID != "2" {
		t.Fatalf("b got %s", got.Message().ID)
	}
}

func TestURL(t *testing.T) {
	var mux transport.Mux
	mux.Register(Scheme, new(URLOpener))
	ctx := context.Background()
	pubT, err := mux.Open(ctx, "memory://orders-"+t.Name()+"?partitions=2&retention=100&max_payload=64")
	if err != nil {
		t.Fatal(err)
	}
	subT, err := mux.Open(ctx, "MEMORY://orders-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	other, err := mux.Open(ctx, "memory://other")
	if err != nil {
		t.Fatal(err)
	}
	c := pubT.(*Transport)
	if c.b != subT.(*Transport).b || c.b == other.(*Transport).b {
		t.Fatal("the same name must reach the same broker, another name another")
	}
	if cfg := c.b.cfg; cfg.partitions != 2 || cfg.retention != 100 || cfg.maxPayload != 64 {
		t.Fatalf("config %+v", cfg)
	}
	s := sub(t, subT, "orders", "g", "", false)
	otherS := sub(t, other, "orders", "g", "", false)
	pub(t, pubT, "orders", "k", "1")
	if err := pubT.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := recv(t, s); d.Message().ID != "1" {
		t.Fatalf("got %s", d.Message().ID)
	}
	quiet(t, otherS, 20*time.Millisecond)
	if err := pubT.Publish(ctx, &handler.Message{Topic: "orders"}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish on closed transport: %v", err)
	}
	pub(t, subT, "orders", "k", "2") // the broker lives on
	if d := recv(t, s); d.Message().ID != "2" {
		t.Fatalf("got %s", d.Message().ID)
	}

	for _, bad := range []struct{ url, says string }{
		{"memory://x?partitions=2&colour=blue&zone=a", "colour, zone"},
		{"memory://x?partitions=two", "partitions"},
		{"memory://x?partitions=0", "Partitions(0)"},
		{"memory://x?retention=-1", "Retention(-1)"},
		{"memory://x?partitions=1&partitions=2", "partitions"},
		{"memory://x/path", "path"},
		{"memory://user:secret@x", "password"},
		{"memory://orders-" + t.Name() + "?partitions=3", "partitions=2, not 3"},
	} {
		_, err := mux.Open(ctx, bad.url)
		if !errors.Is(err, transport.ErrInvalidOption) || !contains(err.Error(), bad.says) {
			t.Errorf("Open(%s) = %v, want ErrInvalidOption naming %q", bad.url, err, bad.says)
		}
		if err != nil && contains(err.Error(), "secret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	// The same settings again are fine.
	if _, err := mux.Open(ctx, "memory://orders-"+t.Name()+"?partitions=2"); err != nil {
		t.Fatal(err)
	}
}

func TestRegistered(t *testing.T) {
	if !slices.Contains(transport.Schemes(), Scheme) {
		t.Fatalf("schemes %v", transport.Schemes())
	}
	ctx := context.Background()
	a, err := transport.Open(ctx, "memory://registered-test")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	bt, err := transport.Open(ctx, "memory://registered-test")
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Close(ctx)
	s := sub(t, bt, "t", "g", "", false)
	pub(t, a, "t", "", "hello")
	if recv(t, s).Message().ID != "hello" {
		t.Fatal("wrong message")
	}
	if _, ok := a.(transport.DeadLetters); !ok {
		t.Fatal("not DeadLetters")
	}
	if _, ok := a.(transport.LagReporter); !ok {
		t.Fatal("not LagReporter")
	}
	if got := s.Semantics(); got.Transport != "memory" || got.Ordering != transport.OrderPerKey || !got.Replay || !got.Attempts ||
		!got.NackDelay || got.Extend || got.NativeDLQ || !got.Headers || got.Ack != transport.AckPerMessage || got.Redelivery != transport.RedeliverOnNack {
		t.Fatalf("semantics %+v", got)
	}
}

// TestChurn runs publishers and a group whose members come and go while
// they consume, and checks that every message is acked exactly once and that
// the deliveries of each message carry attempts 1, 2, …, k with none
// repeated or skipped: redelivery after a Nack, a rebalance or a close
// always counts, and late settles of revoked deliveries change nothing.
func TestChurn(t *testing.T) {
	b := testBroker(t, Partitions(6))
	const n = 20000
	var (
		mu       sync.Mutex
		acked    = map[string]int{}
		attempts = map[string][]int{}
	)
	consume := func(name string, until <-chan struct{}, life time.Duration, settleAll bool) {
		s, err := b.Subscribe(context.Background(), transport.Subscription{Topic: "churn", Group: "g", Consumer: name, StartAtOldest: true})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), life)
		defer cancel()
		go func() {
			select {
			case <-until:
				cancel()
			case <-ctx.Done():
			}
		}()
		for i := 1; ; i++ {
			d, err := s.Receive(ctx)
			if err != nil {
				return
			}
			m := d.Message()
			mu.Lock()
			attempts[m.ID] = append(attempts[m.ID], m.Attempt())
			mu.Unlock()
			switch {
			case i%97 == 0 && !settleAll:
				d.Nack(ctx, time.Millisecond)
			case i%101 == 0 && !settleAll: // left unsettled: redelivered when this member goes
			default:
				if d.Ack(ctx) == nil {
					mu.Lock()
					acked[m.ID]++
					mu.Unlock()
				}
			}
		}
	}
	var pubs sync.WaitGroup
	for w := range 4 {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for i := w; i < n; i += 4 {
				pub(t, b, "churn", "k"+strconv.Itoa(i%53), strconv.Itoa(i))
			}
		}()
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for c := range 2 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				consume(fmt.Sprintf("m%d-%d", c, i), stop, time.Duration(1+i%5)*time.Millisecond, false)
			}
		}()
	}
	pubs.Wait()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	churn.Wait()

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			mu.Lock()
			got := len(acked)
			mu.Unlock()
			if got == n {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	consume("drain", drained, time.Hour, true)

	mu.Lock()
	defer mu.Unlock()
	if len(acked) != n {
		t.Fatalf("%d of %d messages acked", len(acked), n)
	}
	redelivered := 0
	for id, c := range acked {
		if c != 1 {
			t.Fatalf("%s acked %d times", id, c)
		}
		as := attempts[id]
		slices.Sort(as)
		for i, a := range as {
			if a != i+1 {
				t.Fatalf("%s delivered with attempts %v", id, as)
			}
		}
		if len(as) > 1 {
			redelivered++
		}
	}
	if redelivered == 0 {
		t.Fatal("nothing was redelivered: the test did not churn")
	}
	t.Logf("%d of %d messages redelivered", redelivered, n)
	lag, err := b.Lag(context.Background(), transport.Subscription{Topic: "churn", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lag {
		if l.Messages != 0 {
			t.Fatalf("lag %+v after all acked", lag)
		}
	}
}

func TestNoGroupKeepsEverything(t *testing.T) {
	b := testBroker(t, Partitions(1), Retention(3))
	for i := range 10 {
		pub(t, b, "orders", "k", strconv.Itoa(i))
	}
	if l, _ := b.ListDLQ(context.Background(), "orders", 0); len(l) != 10 {
		t.Fatalf("a topic without groups kept %d of 10", len(l))
	}
	s := sub(t, b, "orders", "first", "", true)
	for i := range 10 {
		d := recv(t, s)
		if d.Message().ID != strconv.Itoa(i) {
			t.Fatalf("got %s, want %d", d.Message().ID, i)
		}
		ack(t, d)
	}
	pub(t, b, "orders", "k", "10") // everything received: the log shrinks to 3
	if l, _ := b.ListDLQ(context.Background(), "orders", 0); len(l) != 3 || l[0].ID != "8" {
		t.Fatalf("kept %d after every group received them, want 3", len(l))
	}
}
