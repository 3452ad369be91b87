package rabbitmq

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// member is one member of a sharded group whose balancer the test ticks by
// hand (no loop), so that the order of the members' steps is the test's.
type member struct {
	s *stream
	b *balancer
}

func newMember(t *testing.T, url string, sub transport.Subscription) *member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := New(ctx, url, Shards(4))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	o, err := tr.parseSubscription(sub)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: tr, sub: sub, o: o, sem: semantics(&o), out: make(chan *delivery, o.prefetch),
		done: make(chan struct{}), ended: make(chan struct{}), needConn: make(chan struct{}, 1)}
	m := &member{s: s, b: &balancer{s: s, held: make(map[int]*shardConsumer)}}
	t.Cleanup(m.leave)
	return m
}

// tick runs one balancing tick and waits for the releases it started.
func (m *member) tick(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.b.tick(ctx); err != nil {
		t.Fatalf("tick: %v", err)
	}
	m.b.wg.Wait()
}

// leave closes the member's shard channels and its presence, as Close does.
func (m *member) leave() {
	if m.b.admin == nil {
		return
	}
	m.b.closeAll()
	m.b.wg.Wait()
}

func (m *member) holds() []int {
	var out []int
	for i := range 4 {
		if _, ok := m.b.held[i]; ok {
			out = append(out, i)
		}
	}
	return out
}

// TestBalancerStandbyFreed: two members that raced for one free shard both
// consume it (quorum queues do not enforce exclusive consumers; single
// active consumer makes the second a standby, which declare-ok does not
// count, and which the idle check keeps while its active consumer keeps
// up). A kept standby fills a slot of that member's target
// and, once a third member leaves, one shard queue is left with no
// consumer at all (seen by internal/chaos: s3 with 226 messages and no
// consumer while s0 had two). The order: A alone takes s0..s3; B joins
// and A hands s2, s3 over; C joins (3 members, target 2: nothing moves);
// A gives s1 up; C takes s1 and A, which saw s1 free in the same instant,
// tries to attach too (old code: a standby); B leaves. After the group settles every shard
// queue has exactly one consumer, and a message put in each is received.
func TestBalancerStandbyFreed(t *testing.T) {
	url := "amqp://guest:guest@127.0.0.1:5672/"
	if u := os.Getenv("FERRY_AMQP_URL"); u != "" {
		url = u
	}
	transporttest.RequireBroker(t, "rabbitmq", url)
	topic := transporttest.UniqueName(t, "standby")
	sub := transport.Subscription{Topic: topic, Group: "g"}
	q := topic + ".g"
	raw, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := raw.Channel(); err == nil {
			for _, name := range []string{q, q + ".dlq", q + ".members", q + ".s0", q + ".s1", q + ".s2", q + ".s3"} {
				_, _ = ch.QueueDelete(name, false, false, false)
			}
			_ = ch.ExchangeDelete(topic, false, false)
			_ = ch.ExchangeDelete(q+".dlx", false, false)
			_ = ch.ExchangeDelete(q+".dlx.match", false, false)
		}
		_ = raw.Close()
	})
	a, b, c := newMember(t, url, sub), newMember(t, url, sub), newMember(t, url, sub)

	a.tick(t) // alone: takes all four
	b.tick(t) // joins: nothing free
	a.tick(t) // two members: gives s2, s3 up
	waitConsumers(t, raw, q, "[1 1 0 0]")
	b.tick(t) // takes s2, s3
	c.tick(t) // joins: 3 members, target 2, nothing free
	a.tick(t)
	b.tick(t)
	if got := fmt.Sprint(a.holds(), b.holds(), c.holds()); got != "[0 1] [2 3] []" {
		t.Fatalf("before the race the members hold %s; want [0 1] [2 3] []", got)
	}
	// A gives s1 up (an idle-looking shard, a target that shrank for a
	// moment); C and A both find it free, C attaches first.
	sc := a.b.held[1]
	delete(a.b.held, 1)
	a.b.wg.Add(1)
	a.b.release(sc)
	waitConsumers(t, raw, q, "[1 0 1 1]")
	c.tick(t)
	if got := fmt.Sprint(c.holds()); got != "[1]" {
		t.Fatalf("C holds %s after s1 was freed; want [1]", got)
	}
	a.b.acquire(a.s.t.conn.current(), 1, shardQueue(q, 1))
	b.leave()
	waitConsumers(t, raw, q, "[1 1 0 0]")
	for range 6 {
		a.tick(t)
		c.tick(t)
	}
	// Each shard held by exactly one member. (declare-ok counts only the
	// active consumer of a single-active-consumer quorum queue, so the
	// broker's count alone would not show a standby; the holdings do.)
	holders := [4]int{}
	for _, m := range []*member{a, c} {
		for _, i := range m.holds() {
			holders[i]++
		}
	}
	if holders != [4]int{1, 1, 1, 1} {
		t.Errorf("members holding each shard %v after B left and the group settled (A holds %v, C %v); want [1 1 1 1]",
			holders, a.holds(), c.holds())
	}
	if got := consumersOf(t, raw, q); got != "[1 1 1 1]" {
		t.Errorf("consumers per shard %s after the group settled; want [1 1 1 1]", got)
	}
	// Every shard is read: one message put in each reaches a member.
	pub, err := raw.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := pub.PublishWithContext(t.Context(), "", shardQueue(q, i), false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(seen) < 4 {
		var d *delivery
		select {
		case d = <-a.s.out:
		case d = <-c.s.out:
		case <-deadline:
			t.Fatalf("received %v of one message per shard; want all four (consumers %s)", seen, consumersOf(t, raw, q))
		}
		seen[string(d.raw.Body)] = true
		if err := d.Ack(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// waitConsumers waits until consumersOf shows want: a quorum queue drops
// a closed channel's consumer a moment after the close returns.
func waitConsumers(t *testing.T, c *amqp.Connection, q, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := consumersOf(t, c, q)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers per shard %s; want %s", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consumersOf lists the consumer count of q's four shard queues.
func consumersOf(t *testing.T, c *amqp.Connection, q string) string {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var n []int
	for i := range 4 {
		st, err := ch.QueueDeclarePassive(shardQueue(q, i), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		n = append(n, st.Consumers)
	}
	return fmt.Sprint(n)
}
