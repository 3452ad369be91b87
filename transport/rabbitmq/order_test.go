package rabbitmq_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// orderLog records, per key, the sequence numbers handled, by member.
type orderLog struct {
	mu     sync.Mutex
	seqs   map[string][]int
	member map[string]int
	seen   map[string][]string // ID -> member/attempt of each handling
}

func (l *orderLog) handler(member string) handler.Handler {
	return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		n, err := strconv.Atoi(m.Header("seq"))
		if err != nil {
			return handler.Permanent(err)
		}
		l.mu.Lock()
		l.seqs[m.Key] = append(l.seqs[m.Key], n)
		l.member[member]++
		if l.seen == nil {
			l.seen = map[string][]string{}
		}
		l.seen[m.ID] = append(l.seen[m.ID], fmt.Sprintf("%s/a%d/p%d/%s", member, m.Attempt(), m.Facts().Partition, time.Now().Format("05.000")))
		l.mu.Unlock()
		return nil
	})
}

func (l *orderLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.seqs {
		n += len(s)
	}
	return n
}

// check fails unless every key saw 0..perKey-1 in order, exactly once.
func (l *orderLog) check(t *testing.T, keys, perKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range keys {
		s := l.seqs["k"+strconv.Itoa(k)]
		if len(s) != perKey {
			t.Errorf("key k%d: %d messages handled, want %d", k, len(s), perKey)
			for id, h := range l.seen {
				if len(h) > 1 && strings.HasPrefix(id, fmt.Sprintf("k%d-", k)) {
					t.Logf("  %s handled %v", id, h)
				}
			}
			continue
		}
		for i, n := range s {
			if n != i {
				t.Errorf("key k%d: handled %v at position %d (around: %v), want 0..%d in order", k, n, i, s[max(0, i-3):min(len(s), i+4)], perKey-1)
				break
			}
		}
	}
}

func publishSeq(t *testing.T, tr transport.Publisher, topic string, keys, from, to int) {
	t.Helper()
	var msgs []*handler.Message
	for i := from; i < to; i++ {
		for k := range keys {
			msgs = append(msgs, &handler.Message{ID: fmt.Sprintf("k%d-%d", k, i), Key: "k" + strconv.Itoa(k), Topic: topic,
				Payload: []byte("x"), Headers: map[string]string{"seq": strconv.Itoa(i)}})
		}
	}
	// One at a time per key, in order: a batch is written in order on one channel.
	if err := transport.PublishBatch(context.Background(), tr, msgs); err != nil {
		t.Fatal(err)
	}
}

func newRouter(t *testing.T, name string, s transport.Subscriber, sub transport.Subscription, h handler.Handler) *ferry.Router {
	t.Helper()
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(name, s, sub, h, ferry.Concurrency(8)); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSingleActiveConsumer: on the default URL, two members of a group
// (two connections, each a Router with per-key order) never both consume:
// one is active and handles everything in order, the other stands by; when
// the active one closes, the standby takes over and order still holds.
func TestSingleActiveConsumer(t *testing.T) {
	a, b := open(t), open(t)
	topic := transporttest.UniqueName(t, "sac")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	log := &orderLog{seqs: map[string][]int{}, member: map[string]int{}}
	ra := newRouter(t, "a", a, sub, log.handler("a"))
	rra := ferrytest.Start(t, ra)
	rb := newRouter(t, "b", b, sub, log.handler("b"))
	ferrytest.Start(t, rb)

	const keys, half = 10, 100
	publishSeq(t, a, topic, keys, 0, half)
	waitFor(t, "the first half handled", 20*time.Second, func() bool { return log.total() == keys*half })
	log.mu.Lock()
	if log.member["b"] != 0 || log.member["a"] != keys*half {
		t.Errorf("first half handled by a: %d, b: %d; want all by the first member", log.member["a"], log.member["b"])
	}
	log.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rra.Close(ctx); err != nil {
		t.Fatal(err)
	}
	publishSeq(t, b, topic, keys, half, 2*half)
	waitFor(t, "the second half handled", 20*time.Second, func() bool { return log.total() == 2*keys*half })
	log.check(t, keys, 2*half)
	log.mu.Lock()
	if log.member["b"] != keys*half {
		t.Errorf("after the active member left, the standby handled %d, want %d", log.member["b"], keys*half)
	}
	log.mu.Unlock()
}

// TestSharded: with shards=4 in the URL, messages are hashed by Key over
// four queues, each with single active consumer; a Router handles them
// with per-key order and every shard carries some keys. A second member
// consuming only shards 2 and 3 takes those shards' keys while the first
// keeps 0 and 1.
func TestSharded(t *testing.T) {
	url := withQuery(brokerURL(), "shards=4")
	pub, c1, c2 := openURL(t, url), openURL(t, url), openURL(t, url)
	topic := transporttest.UniqueName(t, "shard")
	cleanupSub(t, brokerURL(), topic, "g", 4)
	log := &orderLog{seqs: map[string][]int{}, member: map[string]int{}}
	sub1 := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptShard: "0,1"}}
	sub2 := transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{rabbitmq.OptShard: "2,3"}}
	ferrytest.Start(t, newRouter(t, "one", c1, sub1, log.handler("one")))
	ferrytest.Start(t, newRouter(t, "two", c2, sub2, log.handler("two")))

	const keys, per = 20, 50
	publishSeq(t, pub, topic, keys, 0, per)
	waitFor(t, "every message handled", 20*time.Second, func() bool { return log.total() == keys*per })
	log.check(t, keys, per)
	log.mu.Lock()
	if log.member["one"] == 0 || log.member["two"] == 0 {
		t.Errorf("member one handled %d, two %d; want both to have shards with keys", log.member["one"], log.member["two"])
	}
	log.mu.Unlock()
	lag, err := c1.Lag(context.Background(), transport.Subscription{Topic: topic, Group: "g"})
	if err != nil || len(lag) != 4 {
		t.Fatalf("lag %v, %v; want 4 shard queues", lag, err)
	}
}

// balanceTick is the transport's balancing interval.
const balanceTick = 100 * time.Millisecond

// TestShardedBalanced: with Shards(4) (the URL's shards=4 in code) and no
// fixed shard option, members share the shard queues. A second member joins mid-stream and the first
// later leaves; every message is handled exactly once, per-key order holds
// across both handovers, and both members did work.
func TestShardedBalanced(t *testing.T) {
	pub, c1, c2 := open(t, rabbitmq.Shards(4)), open(t, rabbitmq.Shards(4)), open(t, rabbitmq.Shards(4))
	topic := transporttest.UniqueName(t, "balance")
	cleanupSub(t, brokerURL(), topic, "g", 4)
	log := &orderLog{seqs: map[string][]int{}, member: map[string]int{}}
	sub := transport.Subscription{Topic: topic, Group: "g"}
	rr1 := ferrytest.Start(t, newRouter(t, "one", c1, sub, log.handler("one")))

	const keys, per = 20, 30
	publishSeq(t, pub, topic, keys, 0, per)
	ferrytest.Start(t, newRouter(t, "two", c2, sub, log.handler("two")))
	publishSeq(t, pub, topic, keys, per, 2*per)
	time.Sleep(3 * balanceTick) // the first member gives two shards up
	publishSeq(t, pub, topic, keys, 2*per, 3*per)
	waitFor(t, "the second member to take shards", 10*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.member["two"] > 0
	})
	waitFor(t, "three quarters handled", 20*time.Second, func() bool { return log.total() >= 3*keys*per })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rr1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	publishSeq(t, pub, topic, keys, 3*per, 4*per)
	waitFor(t, "every message handled", 20*time.Second, func() bool { return log.total() >= 4*keys*per })
	time.Sleep(300 * time.Millisecond) // a duplicate would show up here
	log.check(t, keys, 4*per)
	log.mu.Lock()
	t.Logf("member one handled %d, member two %d", log.member["one"], log.member["two"])
	log.mu.Unlock()
}
