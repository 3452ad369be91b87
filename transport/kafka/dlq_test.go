package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// waitDLQ waits until ListDLQ lists n dead letters in dlq, and returns them.
func waitDLQ(t testing.TB, tr transport.DeadLetters, dlq string, n int) []*handler.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dl, err := tr.ListDLQ(ctxT(t, 10*time.Second), dlq, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dl) == n {
			return dl
		}
		if time.Now().After(deadline) {
			t.Fatalf("DLQ %s lists %d dead letters %v, want %d", dlq, len(dl), ids(dl), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poisonRecords are two records that cannot be decoded around two good
// ones, all with key k: a header repeated with different values, and a
// header name that is not UTF-8.
func poisonRecords(topic string) []*sarama.ProducerMessage {
	rec := func(value string, hs ...string) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(value)}
		for i := 0; i < len(hs); i += 2 {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(hs[i]), Value: []byte(hs[i+1])})
		}
		return m
	}
	return []*sarama.ProducerMessage{
		rec("ok-1", "ferry-id", "a"),
		rec("bad", "ferry-id", "poison", "h", "1", "h", "2"),
		rec("bad-name", "ferry-id", "poison-2", "\xffname", "v"),
		rec("ok-2", "ferry-id", "b"),
	}
}

// TestPoison: records that cannot be decoded go to the group's DLQ as
// permanent failures with no attempt, never reach the handler, and neither
// block their partition nor end the session; the commit passes them.
func TestPoison(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	createTopic(t, addrs, "orders", 1)
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	sub := transport.Subscription{Topic: "orders", Group: "g", StartAtOldest: true}
	runRouter(t, tr, sub, handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m.ID)
		if len(got) == 2 {
			close(done)
		}
		return nil
	}))
	produceRaw(t, addrs, poisonRecords("orders")...)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the messages around the poison ones were not handled")
	}
	mu.Lock()
	if fmt.Sprint(got) != "[a b]" {
		t.Errorf("handled %v, want [a b]", got)
	}
	mu.Unlock()
	dlq := transport.DLQName(tr, sub)
	if dlq != "g.dlq" {
		t.Errorf("DLQName = %q, want g.dlq", dlq)
	}
	dl := waitDLQ(t, tr, dlq, 2)
	for i, want := range []struct {
		id, payload, header, value string
		offset                     int64
	}{{"poison", "bad", "h", "1", 1}, {"poison-2", "bad-name", "\uFFFDname", "v", 2}} {
		m := dl[i]
		r, ok := transport.ReadDeadLetter(m)
		if !ok || m.ID != want.id || m.Key != "k" || string(m.Payload) != want.payload || m.Headers[want.header] != want.value ||
			r.Class != "permanent" || r.Attempts != 0 || r.Group != "g" || r.OriginalTopic != "orders" ||
			r.Partition != 0 || r.Offset != want.offset || r.FirstFailure.IsZero() {
			t.Errorf("dead letter %d: %s %q %q %v, record %+v", i, m.ID, m.Key, m.Payload, m.Headers, r)
		}
	}
	waitCommitted(t, tr, transport.Subscription{Topic: "orders", Group: "g"}, 0)
}

// TestPoisonDLQDown: while the DLQ cannot be written, Receive returns the
// error (one write per call, no loop inside the transport), the poison
// record stays unfinished and the commit holds at it; the next Receive
// that writes it goes on, and the record is dead-lettered once.
func TestPoisonDLQDown(t *testing.T) {
	c := startCluster(t, 1)
	addrs := c.ListenAddrs()
	tr := open(t, addrs)
	createTopic(t, addrs, "pay", 1)
	sub := transport.Subscription{Topic: "pay", Group: "g", StartAtOldest: true}
	st := subscribe(t, tr, sub)
	dlq := transport.DLQName(tr, sub)

	// The first two produce requests to the DLQ are refused.
	var refused atomic.Int32
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		toDLQ := false
		for _, tp := range req.Topics {
			toDLQ = toDLQ || tp.Topic == dlq
		}
		c.KeepControl()
		if !toDLQ || refused.Load() == 2 {
			return nil, nil, false // handled as usual
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = 29 // TOPIC_AUTHORIZATION_FAILED: a definite failure
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		refused.Add(1)
		return resp, nil, true
	})
	produceRaw(t, addrs, poisonRecords("pay")[:2]...)
	produceRaw(t, addrs, poisonRecords("pay")[3])
	ctx := ctxT(t, 20*time.Second)
	d, err := st.Receive(ctx)
	if err != nil || d.Message().ID != "a" {
		t.Fatalf("first Receive: %v", err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, tr, sub, 2) // a is committed: the commit is at the poison record
	for i := range 2 {
		d, err := st.Receive(ctx)
		if err == nil {
			t.Fatalf("Receive %d with the DLQ refusing writes returned %s; want the write's error", i, d.Message().ID)
		}
		if !strings.Contains(err.Error(), "dead-letter the undecodable record pay/0@1 to g.dlq") {
			t.Errorf("Receive %d: %v", i, err)
		}
	}
	if n := refused.Load(); n != 2 {
		t.Errorf("%d DLQ writes refused; want one per Receive, 2", n)
	}
	time.Sleep(time.Second) // ten commit intervals: the commit must stay at offset 1
	if lag, err := tr.Lag(ctx, sub); err != nil || len(lag) != 1 || lag[0].Messages != 2 {
		t.Errorf("lag %v (%v) while the poison record waits; want 2 (the commit holds at it)", lag, err)
	}
	d, err = st.Receive(ctx)
	if err != nil || d.Message().ID != "b" {
		t.Fatalf("Receive once the DLQ takes writes: %v", err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, tr, sub, 0)
	if dl := waitDLQ(t, tr, dlq, 1); dl[0].ID != "poison" {
		t.Errorf("DLQ holds %v, want the poison record once", ids(dl))
	}
}

// TestDeadLetterRecommended: with middleware.Recommended, a permanent
// failure is dead-lettered to the DLQ that transport.DLQName names, and
// ListDLQ returns it with its ID, Key, payload, original headers and the
// dead-letter record; ReplayDLQ brings it back to the handler once.
func TestDeadLetterRecommended(t *testing.T) {
	addrs := newCluster(t, 2)
	createTopic(t, addrs, "bill", 2)
	tr := open(t, addrs)
	sub := transport.Subscription{Topic: "bill", Group: "billing", StartAtOldest: true}
	stack, err := middleware.Recommended(tr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	h := handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID]++
		if m.ID == "bad-1" && seen[m.ID] == 1 {
			return handler.Permanentf("order %s: unknown currency", m.Key)
		}
		return nil
	})
	r, err := ferry.NewRouter(ferry.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("billing", tr, sub, stack(h)); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	publishAll(t, tr, []*handler.Message{ // bad-1 first: offset 0 of its partition
		{ID: "bad-1", Key: "cust-2", Topic: "bill", Payload: []byte(`{"currency":"XXX"}`), Headers: map[string]string{"app": "shop", "trace": "t-1"}},
		{ID: "ok-1", Key: "cust-1", Topic: "bill", Payload: []byte("fine")},
	})
	dlq := transport.DLQName(tr, sub)
	dl := waitDLQ(t, tr, dlq, 1)
	m := dl[0]
	rec, ok := transport.ReadDeadLetter(m)
	if !ok || m.ID != "bad-1" || m.Key != "cust-2" || string(m.Payload) != `{"currency":"XXX"}` ||
		m.Headers["app"] != "shop" || m.Headers["trace"] != "t-1" || len(m.Headers) != 2+len(transport.DeadLetterHeaders) {
		t.Errorf("dead letter %s key %s payload %q headers %v", m.ID, m.Key, m.Payload, m.Headers)
	}
	if rec.Class != "permanent" || !strings.Contains(rec.Error, "unknown currency") || rec.Subscription != "billing" ||
		rec.Group != "billing" || rec.OriginalTopic != "bill" || rec.Partition != kgoPartition("cust-2", 2) || rec.Offset != 0 || rec.Attempts != 1 {
		t.Errorf("dead-letter record %+v", rec)
	}
	n, err := tr.ReplayDLQ(ctxT(t, 10*time.Second), dlq, transport.Replay{})
	if err != nil || n != 1 {
		t.Fatalf("ReplayDLQ = %d, %v; want 1", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		again := seen["bad-1"]
		mu.Unlock()
		if again == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bad-1 handled %d times after the replay, want 2", again)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitCommitted(t, tr, sub, 0)
	mu.Lock()
	if seen["bad-1"] != 2 || seen["ok-1"] != 1 {
		t.Errorf("handled %v; want ok-1 once and bad-1 twice (the failure and the replay)", seen)
	}
	mu.Unlock()
	if dl := waitDLQ(t, tr, dlq, 0); len(dl) != 0 {
		t.Errorf("DLQ after the replay: %v", ids(dl))
	}
}
