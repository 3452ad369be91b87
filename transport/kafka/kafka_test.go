package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// publishAll publishes msgs concurrently and fails t on any error.
func publishAll(t testing.TB, tr *kafka.Transport, msgs []*handler.Message) {
	t.Helper()
	if err := tr.PublishBatch(ctxT(t, 30*time.Second), msgs); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
}

// receive reads n deliveries from st, acking each, and returns their messages.
func receive(t testing.TB, st transport.Stream, n int) []*handler.Message {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	var out []*handler.Message
	for len(out) < n {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after %d of %d: %v", len(out), n, err)
		}
		out = append(out, d.Message().Clone())
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	return out
}

func subscribe(t testing.TB, tr *kafka.Transport, sub transport.Subscription) transport.Stream {
	t.Helper()
	st, err := tr.Subscribe(ctxT(t, 20*time.Second), sub)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

func TestWireFormat(t *testing.T) {
	addrs := newCluster(t, 3)
	tr := open(t, addrs)
	createTopic(t, addrs, "wire", 3)
	st := subscribe(t, tr, transport.Subscription{Topic: "wire", Group: "g", StartAtOldest: true})
	publishAll(t, tr, []*handler.Message{{ID: "id-1", Key: "order-1", Topic: "wire", Payload: []byte("p"), Headers: map[string]string{"a": "1"}}})

	// Read the raw record with sarama.
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	c, err := sarama.NewConsumer(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := kgoPartition("order-1", 3)
	pc, err := c.ConsumePartition("wire", want, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	select {
	case cm := <-pc.Messages():
		hs := map[string]string{}
		for _, h := range cm.Headers {
			hs[string(h.Key)] = string(h.Value)
		}
		if string(cm.Key) != "order-1" || string(cm.Value) != "p" || hs["ferry-id"] != "id-1" ||
			hs["_watermill_message_uuid"] != "id-1" || hs["a"] != "1" || len(hs) != 3 {
			t.Errorf("record key %q value %q headers %v; want key order-1, value p, ferry-id and _watermill_message_uuid id-1, a=1", cm.Key, cm.Value, hs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no record on partition %d (the murmur2 partition of order-1)", want)
	}
	m := receive(t, st, 1)[0]
	if m.ID != "id-1" || m.Key != "order-1" || string(m.Payload) != "p" || len(m.Headers) != 1 || m.Headers["a"] != "1" {
		t.Errorf("received %+v", m)
	}
	if f := m.Facts(); f.Partition != want || f.Offset != 0 || f.Attempt != 1 || f.Transport != "kafka" {
		t.Errorf("facts %+v", f)
	}
}

// kgoPartition is the partition franz-go (Java-compatible murmur2) picks.
func kgoPartition(key string, n int) int32 {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	return int32(p.Partition(&kgo.Record{Key: []byte(key)}, n))
}

func TestPartitioner(t *testing.T) {
	addrs := newCluster(t, 8)
	createTopic(t, addrs, "murmur", 8)
	createTopic(t, addrs, "fnv", 8)
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i*7919)
	}
	check := func(topic string, tr *kafka.Transport, want func(string) int32) {
		var msgs []*handler.Message
		for _, k := range keys {
			msgs = append(msgs, &handler.Message{ID: k, Key: k, Topic: topic})
		}
		publishAll(t, tr, msgs)
		st := subscribe(t, tr, transport.Subscription{Topic: topic, Group: "g-" + topic, StartAtOldest: true})
		bad := 0
		for _, m := range receive(t, st, len(keys)) {
			if got := m.Facts().Partition; got != want(m.Key) {
				bad++
				if bad < 4 {
					t.Errorf("%s: key %s on partition %d, want %d", topic, m.Key, got, want(m.Key))
				}
			}
		}
	}
	check("murmur", open(t, addrs), func(k string) int32 { return kgoPartition(k, 8) })
	fnvP := sarama.NewHashPartitioner("fnv")
	check("fnv", open(t, addrs, kafka.Partitioner(kafka.FNV1a)), func(k string) int32 {
		p, _ := fnvP.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(k)}, 8)
		return p
	})
}

func TestWatermillUUID(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	st := subscribe(t, tr, transport.Subscription{Topic: "wm", Group: "g", StartAtOldest: true})
	produceRaw(t, addrs, &sarama.ProducerMessage{Topic: "wm", Value: sarama.StringEncoder("x"), Headers: []sarama.RecordHeader{
		{Key: []byte("_watermill_message_uuid"), Value: []byte("wm-1")}, {Key: []byte("meta"), Value: []byte("v")}}})
	produceRaw(t, addrs, &sarama.ProducerMessage{Topic: "wm", Value: sarama.StringEncoder("y"), Headers: []sarama.RecordHeader{
		{Key: []byte("_watermill_message_uuid"), Value: []byte("wm-2")}, {Key: []byte("ferry-id"), Value: []byte("ferry-2")}}})
	ms := receive(t, st, 2)
	if ms[0].ID != "wm-1" || ms[0].Headers["meta"] != "v" || len(ms[0].Headers) != 1 {
		t.Errorf("watermill message: ID %q headers %v; want wm-1 and meta=v only", ms[0].ID, ms[0].Headers)
	}
	if ms[1].ID != "ferry-2" {
		t.Errorf("ID %q; want the ferry-id header to win over the watermill UUID", ms[1].ID)
	}
}

func produceRaw(t testing.TB, addrs []string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// waitCommitted waits until the group has no lag left on topic.
func waitCommitted(t testing.TB, tr *kafka.Transport, sub transport.Subscription, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lag, err := tr.Lag(ctxT(t, 10*time.Second), sub)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, l := range lag {
			total += l.Messages
		}
		if total == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag %v, want %d in total", lag, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runRouter runs a Router with one subscription until the test ends.
func runRouter(t testing.TB, tr transport.Subscriber, sub transport.Subscription, h handler.Handler, opts ...ferry.SubscriptionOption) *ferry.Router {
	t.Helper()
	r, err := ferry.NewRouter(ferry.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add("sub", tr, sub, h, opts...); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, r)
	return r
}

func TestDLQReplay(t *testing.T) {
	addrs := newCluster(t, 2)
	tr := open(t, addrs)
	createTopic(t, addrs, "pay", 2)
	createTopic(t, addrs, "pay.dlq", 2)
	var msgs []*handler.Message
	for i := range 4 {
		msgs = append(msgs, &handler.Message{ID: "d" + strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Topic: "pay.dlq", Payload: []byte{byte(i)},
			Headers: map[string]string{"app": "x", transport.HeaderOriginalTopic: "pay", transport.HeaderError: "boom", transport.HeaderErrorClass: "transient"}})
	}
	for _, m := range msgs { // one at a time, so that timestamps order them
		publishAll(t, tr, []*handler.Message{m})
		time.Sleep(2 * time.Millisecond)
	}
	list, err := tr.ListDLQ(ctxT(t, 10*time.Second), "pay.dlq", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 || list[0].ID != "d0" || list[3].ID != "d3" || list[2].Key != "k2" || list[1].Headers[transport.HeaderError] != "boom" {
		t.Fatalf("ListDLQ: %d messages %v", len(list), ids(list))
	}
	n, err := tr.ReplayDLQ(ctxT(t, 10*time.Second), "pay.dlq", transport.Replay{IDs: []string{"d1"}, Keys: []string{"k3"}})
	if err != nil || n != 2 {
		t.Fatalf("ReplayDLQ = %d, %v; want 2", n, err)
	}
	list, err = tr.ListDLQ(ctxT(t, 10*time.Second), "pay.dlq", 0)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(list)) != "[d0 d2]" {
		t.Errorf("after replay the DLQ lists %v, want [d0 d2]", ids(list))
	}
	st := subscribe(t, tr, transport.Subscription{Topic: "pay", Group: "g", StartAtOldest: true})
	got := receive(t, st, 2)
	for _, m := range got {
		if len(m.Headers) != 1 || m.Headers["app"] != "x" || (m.ID != "d1" && m.ID != "d3") || m.Key != "k"+m.ID[1:] {
			t.Errorf("replayed %s key %s headers %v; want original headers only", m.ID, m.Key, m.Headers)
		}
	}
}

func ids(ms []*handler.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestLagAndReset(t *testing.T) {
	addrs := newCluster(t, 2)
	tr := open(t, addrs)
	createTopic(t, addrs, "lag", 2)
	sub := transport.Subscription{Topic: "lag", Group: "g", StartAtOldest: true}
	var msgs []*handler.Message
	for i := range 10 {
		msgs = append(msgs, &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Topic: "lag"})
	}
	publishAll(t, tr, msgs)
	time.Sleep(20 * time.Millisecond)
	lag, err := tr.Lag(ctxT(t, 10*time.Second), sub)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, l := range lag {
		total += l.Messages
		if l.Messages > 0 && l.OldestAge < 10*time.Millisecond {
			t.Errorf("partition %s: %d behind but age %v", l.Partition, l.Messages, l.OldestAge)
		}
	}
	if total != 10 || len(lag) != 2 {
		t.Errorf("lag before consuming %v, want 10 over 2 partitions", lag)
	}
	if n, err := tr.Consumed(ctxT(t, 10*time.Second), sub); err != nil || n != 0 {
		t.Errorf("consumed before consuming: %d, %v; want 0", n, err)
	}
	st := subscribe(t, tr, sub)
	receive(t, st, 10)
	waitCommitted(t, tr, sub, 0)
	if n, err := tr.Consumed(ctxT(t, 10*time.Second), sub); err != nil || n != 10 {
		t.Errorf("consumed after consuming all: %d, %v; want 10", n, err)
	}

	// A reset refuses while the member is live, but a dry run works.
	reset := kafka.Reset{Group: "g", Topic: "lag", To: kafka.ResetShift, Shift: -2}
	if _, err := tr.ResetOffsets(ctxT(t, 10*time.Second), reset); !errors.Is(err, kafka.ErrGroupActive) {
		t.Fatalf("ResetOffsets with a live member: %v, want ErrGroupActive", err)
	}
	reset.DryRun = true
	plan, err := tr.ResetOffsets(ctxT(t, 10*time.Second), reset)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan {
		if c.To != max(c.From-2, 0) {
			t.Errorf("dry run: partition %d from %d to %d, want from-2", c.Partition, c.From, c.To)
		}
	}
	if err := st.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, addrs, "g")
	reset.DryRun = false
	if _, err := tr.ResetOffsets(ctxT(t, 10*time.Second), reset); err != nil {
		t.Fatalf("ResetOffsets: %v", err)
	}
	waitCommitted(t, tr, sub, 4) // 2 back on each partition
	if n, err := tr.Consumed(ctxT(t, 10*time.Second), sub); err != nil || n != 6 {
		t.Errorf("consumed after shifting back 2 per partition: %d, %v; want 6", n, err)
	}
	if _, err := tr.ResetOffsets(ctxT(t, 10*time.Second), kafka.Reset{Group: "g", Topic: "lag", To: kafka.ResetEarliest}); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, tr, sub, 10)
	if _, err := tr.ResetOffsets(ctxT(t, 10*time.Second), kafka.Reset{Group: "g", Topic: "lag", To: kafka.ResetTime, Time: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, tr, sub, 0)
	// The group resumes from the reset: shift back 1 on each partition re-delivers 2.
	if _, err := tr.ResetOffsets(ctxT(t, 10*time.Second), kafka.Reset{Group: "g", Topic: "lag", To: kafka.ResetShift, Shift: -1}); err != nil {
		t.Fatal(err)
	}
	st2 := subscribe(t, tr, sub)
	receive(t, st2, 2)
	waitCommitted(t, tr, sub, 0)
}

// waitEmpty waits until group has no members.
func waitEmpty(t testing.TB, addrs []string, group string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	a, err := sarama.NewClusterAdmin(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := a.DescribeConsumerGroups([]string{group})
		if err == nil && len(ds) == 1 && len(ds[0].Members) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still has members: %v", group, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNackDelayOtherKeys: a Nack with a delay re-runs that message after
// the delay, with the attempt count increased, while other messages of the
// same partition keep flowing; the commit holds at the nacked offset.
func TestNackDelayOtherKeys(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs)
	createTopic(t, addrs, "nack", 1)
	var msgs []*handler.Message
	for i := range 5 {
		msgs = append(msgs, &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Topic: "nack"})
	}
	for _, m := range msgs {
		publishAll(t, tr, []*handler.Message{m})
	}
	sub := transport.Subscription{Topic: "nack", Group: "g", StartAtOldest: true}
	st := subscribe(t, tr, sub)
	ctx := ctxT(t, 20*time.Second)
	d, err := st.Receive(ctx)
	if err != nil || d.Message().ID != "0" {
		t.Fatalf("first Receive: %v", err)
	}
	nackedAt := time.Now()
	if err := d.Nack(ctx, 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 5; i++ {
		d, err := st.Receive(ctx)
		if err != nil || d.Message().ID != strconv.Itoa(i) {
			t.Fatalf("Receive %d: %v %v", i, d, err)
		}
		if time.Since(nackedAt) > 500*time.Millisecond {
			t.Errorf("message %d waited behind the nacked one", i)
		}
		_ = d.Ack(ctx)
	}
	time.Sleep(300 * time.Millisecond) // two commit intervals
	lag, _ := tr.Lag(ctx, sub)
	if len(lag) != 1 || lag[0].Messages != 5 {
		t.Errorf("lag %v while offset 0 waits for its retry; want 5 (the commit holds)", lag)
	}
	d, err = st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message().ID != "0" || d.Message().Attempt() != 2 || time.Since(nackedAt) < 700*time.Millisecond {
		t.Errorf("redelivery %s attempt %d after %v; want 0, attempt 2, after 700ms", d.Message().ID, d.Message().Attempt(), time.Since(nackedAt))
	}
	_ = d.Ack(ctx)
	waitCommitted(t, tr, sub, 0)
}

// TestCooperativeStatic: cooperative-sticky assignment with static
// members shares the work, and a member leaving hands its partitions over
// with nothing lost.
func TestCooperativeStatic(t *testing.T) {
	addrs := newCluster(t, 4)
	createTopic(t, addrs, "coop", 4)
	trA := open(t, addrs, kafka.Assignment(kafka.CooperativeSticky))
	trB := open(t, addrs, kafka.Assignment(kafka.CooperativeSticky))
	sub := transport.Subscription{Topic: "coop", Group: "g", StartAtOldest: true}
	subA, subB := sub, sub
	subA.Consumer, subB.Consumer = "member-a", "member-b"
	var mu sync.Mutex
	seen := map[string]map[string]bool{"a": {}, "b": {}}
	h := func(who string) handler.Handler {
		return handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
			mu.Lock()
			seen[who][m.ID] = true
			mu.Unlock()
			return nil
		})
	}
	runRouter(t, trA, subA, h("a"))
	rb := runRouter(t, trB, subB, h("b"))
	var msgs []*handler.Message
	for i := range 400 {
		msgs = append(msgs, &handler.Message{ID: strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Topic: "coop"})
	}
	publishAll(t, trA, msgs[:200])
	waitSeen := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			all := map[string]bool{}
			for _, s := range seen {
				for id := range s {
					all[id] = true
				}
			}
			mu.Unlock()
			if len(all) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages handled", len(all), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitSeen(200)
	mu.Lock()
	if len(seen["a"]) == 0 || len(seen["b"]) == 0 {
		t.Errorf("work not shared: a %d, b %d", len(seen["a"]), len(seen["b"]))
	}
	mu.Unlock()
	if err := rb.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	publishAll(t, trA, msgs[200:])
	waitSeen(400)
}

// TestSASL authenticates with PLAIN and SCRAM against a kfake cluster that
// requires it, from code and from a URL; a wrong password fails without
// showing it.
func TestSASL(t *testing.T) {
	addrs := newCluster(t, 1, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "alice", "plain-secret"),
		kfake.Superuser("SCRAM-SHA-256", "bob", "scram256-secret"),
		kfake.Superuser("SCRAM-SHA-512", "carol", "scram512-secret"))
	for _, c := range []struct {
		mech       kafka.SASLMechanism
		user, pass string
	}{{kafka.SASLPlain, "alice", "plain-secret"}, {kafka.SASLScramSHA256, "bob", "scram256-secret"}, {kafka.SASLScramSHA512, "carol", "scram512-secret"}} {
		t.Run(string(c.mech), func(t *testing.T) {
			tr := open(t, addrs, kafka.SASL(c.mech, c.user, c.pass), kafka.AllowPlaintextAuth(true))
			topic := "sasl-" + c.user
			st := subscribe(t, tr, transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true})
			publishAll(t, tr, []*handler.Message{{ID: "1", Topic: topic}})
			receive(t, st, 1)
		})
	}
	u := fmt.Sprintf("kafka://bob:scram256-secret@%s?sasl=scram-sha-256&allow_plaintext_auth=true&session_timeout=1s&heartbeat=100ms", addrs[0])
	tr, err := transport.Open(ctxT(t, 10*time.Second), u)
	if err != nil {
		t.Fatalf("Open by URL: %v", err)
	}
	_ = tr.Close(context.Background())
	ctx := ctxT(t, 5*time.Second)
	_, err = kafka.New(ctx, brokerURL(addrs), kafka.SASL(kafka.SASLScramSHA512, "carol", "wrong-password-xyz"), kafka.AllowPlaintextAuth(true))
	if err == nil {
		t.Fatal("a wrong password connected")
	}
	if s := err.Error(); contains(s, "wrong-password-xyz") {
		t.Errorf("error shows the password: %s", s)
	}
	_, err = transport.Open(ctx, fmt.Sprintf("kafka://carol:wrong-password-xyz@%s?sasl=scram-sha-512&bogus=1", addrs[0]))
	if err == nil || contains(err.Error(), "wrong-password-xyz") || !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("unknown key: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestOptionErrors(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	for _, o := range []kafka.Option{
		kafka.Partitioner("crc32"), kafka.Compression("brotli"), kafka.StartAt("middle"), kafka.Assignment("random"),
		kafka.PartitionWindow(0), kafka.DeliveryTimeout(0), kafka.Version("x"), kafka.Version("0.10.2"), kafka.SASL("GSSAPI", "u", "p"),
	} {
		if _, err := kafka.New(ctx, "kafka://127.0.0.1:1", o); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("bad option: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := kafka.New(ctx, "kafka://127.0.0.1:1", kafka.Heartbeat(5*time.Second)); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("heartbeat over a third of the session timeout: %v", err)
	}
}

// TestPublishTooLarge: an oversized message is refused before sending.
func TestPublishTooLarge(t *testing.T) {
	addrs := newCluster(t, 1)
	tr := open(t, addrs, kafka.MaxPayload(100))
	err := tr.Publish(ctxT(t, 5*time.Second), &handler.Message{Topic: "big", Payload: make([]byte, 101)})
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("Publish 101 bytes with MaxPayload(100): %v", err)
	}
}

// TestPublishUnknownOutcome: a broker that never answers produce requests
// makes Publish report an unknown outcome at the delivery timeout, not a
// failure.
func TestPublishUnknownOutcome(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(1, "void"))
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
	// The broker reads produce requests and never answers them.
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true
	})
	start := time.Now()
	err = tr.Publish(ctx, &handler.Message{Topic: "void", Payload: []byte("x")})
	if !errors.Is(err, transport.ErrUnknownOutcome) {
		t.Fatalf("Publish to a broker that never answers: %v, want ErrUnknownOutcome", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Errorf("returned after %v, want about the 500ms delivery timeout", d)
	}
	// A ctx ending after the hand-over is an unknown outcome too, and
	// still a context error.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = tr.Publish(cctx, &handler.Message{Topic: "void", Payload: []byte("y")})
	if !errors.Is(err, transport.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish with an expiring ctx: %v, want ErrUnknownOutcome and DeadlineExceeded", err)
	}
}
