package transporttest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The suite must be able to fail. Each mutant below wraps the memory
// transport with one bug a real transport could have; TestSuiteCatchesMutants
// runs the suite on it in a child process and checks that the case meant to
// catch that bug fails. A suite that passes a broken transport proves
// nothing.

const mutantEnv = "FERRY_TRANSPORTTEST_MUTANT"

var mutants = []struct {
	name   string // the bug
	fails  string // the case that must catch it; "" runs the whole suite
	output string // text the failure must contain; "" for a control, which must pass
}{
	{"none", "", ""},        // control: the wrapper alone passes the whole suite
	{"window", "", ""},      // control: a stream that enforces the MaxUnsettled of 1 it declares passes too
	{"lease", "Extend", ""}, // control: the lease the Extend mutants break passes the Extend case
	{"hold-back", "Ordering/PerKey", "per-key order broken on the stream"},
	{"hold-back", "Ordering/PerKeyRouter", "per-key order broken"},
	{"ack-noop", "Ack", "was acked before the consumer left, but was delivered again"},
	{"ack-noop", "Router/Drain", "handled and acked by the draining Router, but came again"},
	{"ack-noop", "Batch/Poison", "was handled and acked in a batch, but came again"},
	{"key-scatter", "Batch/PerKey", "per-key order broken through batches"},
	{"close-acks", "Ack", "not redelivered to the next consumer"},
	{"nack-acks", "Redelivery/OnNack", "redelivery 1 after Nack"},
	{"nack-no-delay", "NackDelay", "before the delay passed"},
	{"settle-twice-nil", "Settle/Twice", "want an error wrapping transport.ErrSettled"},
	{"header-leak", "RoundTrip", "must not leak into Headers"},
	{"header-leak", "Headers", "Headers ="},
	{"cancel-loses", "Cancel/Receive", "not delivered within"},
	{"slow-cancel", "Cancel/Receive", "did not return within"},
	{"attempts-flat", "Attempts", "want 2"},
	{"maxpayload-lie", "MaxPayload", "succeeded; want an error wrapping transport.ErrTooLarge"},
	{"duplicate", "Groups/FanOut", "delivered more than once"},
	{"group-private", "Groups/Compete", "delivered more than once"},
	{"replay-ignored", "Replay", "not delivered within"},
	{"declare-extend", "Extend", "does not implement transport.Extender"},
	{"key-scatter", "Ordering/PerKey", "per-key order broken on the stream"},
	{"key-scatter", "Ordering/PerKeyRouter", "per-key order broken"},
	{"declare-nativedlq", "", "Semantics.NativeDLQ = true is declared, but no conformance case proved it"},
	{"declare-window", "MaxUnsettled", "Receive must wait while 1 deliveries are unsettled"},
	{"extend-noop", "Extend", "Extend did not keep its lease"},
	{"lease-ignored", "Extend", "was not delivered again within"},
	{"shared-group", "Groups/Compete", "competing members broke it"},
	{"revoke-plain-error", "Revoked", "must report an error wrapping transport.ErrRevoked"},
	{"revoke-ack-succeeds", "Revoked", "A's Ack of it succeeded too"},
	{"dlq-drops-header", "DeadLetter", "want the original's, exactly"},
	{"dlq-record-group", "DeadLetter", "dead-letter record: Group ="},
	{"replay-twice", "DeadLetter", "ReplayDLQ must bring it back once"},
	{"replay-keeps", "DeadLetter", "still returns the dead letter after ReplayDLQ"},
	{"declare-lies", "Declare", "differs from what the stream Subscribe opened declares"},
	{"unknown-option-accepted", "Declare", "want an error wrapping transport.ErrInvalidOption that names it"},
	{"hint-missing", "Ordering/Hint", "OrderingHint is empty"},
	{"hint-on-ordered", "Ordering/Hint", "the hint is for streams that keep no order"},
	{"invalid-rewrite", "InvalidMessage", "accepted, but came back with ID"},
	{"invalid-wrong-sentinel", "InvalidMessage", "or an error wrapping transport.ErrInvalidMessage"},
	{"invalid-unnamed", "InvalidMessage", "want the error to name the field"},
}

// TestSuiteCatchesMutants runs the suite against each mutant in a child
// process and checks that it fails where it should.
func TestSuiteCatchesMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("inside a mutant run")
	}
	if testing.Short() {
		t.Skip("mutation runs are slow; skipped with -short")
	}
	for _, m := range mutants {
		name := m.name
		if m.fails != "" {
			name += "/" + m.fails
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := "^TestMutant$"
			if m.fails != "" {
				for _, part := range strings.Split(m.fails, "/") {
					run += "/^" + part + "$"
				}
			}
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1", "-test.timeout=3m")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the suite: %v", err)
			}
			if m.output == "" {
				if err != nil {
					t.Fatalf("control %q fails the suite:\n%s", m.name, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("the suite passed a transport with bug %q; want %s to fail:\n%s", m.name, m.fails, out)
			}
			want := "--- FAIL: TestMutant"
			if m.fails != "" {
				want += "/" + m.fails + " "
			}
			if !strings.Contains(string(out), want) || !strings.Contains(string(out), m.output) {
				t.Errorf("bug %q: want %q and %q in the output:\n%s", m.name, want, m.output, out)
			}
		})
	}
}

// TestMutant runs the suite on the mutant named by the environment; only
// TestSuiteCatchesMutants runs it.
func TestMutant(t *testing.T) {
	m := os.Getenv(mutantEnv)
	if m == "" {
		t.Skip("run by TestSuiteCatchesMutants")
	}
	var opts []memory.Option
	if m == "shared-group" {
		opts = append(opts, memory.Partitions(1)) // one consumer alone keeps the topic's order
	}
	transporttest.Run(t, mutHarness{inner: newMemoryHarness(t, opts...), m: m, shared: newSharedGroups()})
}

// mutLease is the lease of the lease mutants' deliveries.
const mutLease = time.Second

type mutHarness struct {
	inner  memoryHarness
	m      string
	shared *sharedGroups
}

func (h mutHarness) Open(tb testing.TB) transport.Transport {
	return &mutConn{Transport: h.inner.Open(tb), m: h.m, shared: h.shared}
}

// MakeLease gives deliveries a lease of mutLease where the mutant leases
// them; the memory transport takes no options, so sub is unchanged.
func (h mutHarness) MakeLease(tb testing.TB, sub transport.Subscription) (transport.Subscription, time.Duration) {
	return sub, mutLease
}

// leased reports whether mutant m leases deliveries.
func leased(m string) bool { return m == "lease" || m == "extend-noop" || m == "lease-ignored" }

// mutate is what mutant m declares instead of sem, on streams and in
// Declare alike.
func mutate(m string, sem transport.Semantics) transport.Semantics {
	switch {
	case m == "maxpayload-lie":
		sem.MaxPayload = 1000
	case m == "declare-extend" || leased(m):
		sem.Extend = true
	case m == "declare-nativedlq":
		sem.NativeDLQ = true
	case m == "window" || m == "declare-window":
		sem.MaxUnsettled = 1
	case m == "shared-group":
		sem.Ordering = transport.OrderPerTopic
	case m == "hint-missing":
		sem.Ordering, sem.OrderingHint = transport.OrderNone, ""
	case m == "hint-on-ordered":
		sem.OrderingHint = "partitions=1"
	}
	return sem
}

type mutConn struct {
	transport.Transport
	m      string
	shared *sharedGroups
}

// scatterKey is where the "key-scatter" bug hides the real Key.
const scatterKey = "x-scatter-key"

var scatterN atomic.Int64

func (c *mutConn) Publish(ctx context.Context, m *handler.Message) error {
	switch {
	case c.m == "key-scatter" && m.Key != "":
		// Partition by a key that changes on every message, as if the
		// partitioner ignored the Key.
		c2 := m.Clone()
		if c2.Headers == nil {
			c2.Headers = make(map[string]string)
		}
		c2.Headers[scatterKey] = m.Key
		c2.Key = m.Key + "#" + strconv.FormatInt(scatterN.Add(1), 10)
		m = c2
	case c.m == "invalid-rewrite":
		// The U+FFFD rewrite an encoder does to text that is not UTF-8.
		c2 := m.Clone()
		c2.ID, c2.Key = strings.ToValidUTF8(m.ID, "\uFFFD"), strings.ToValidUTF8(m.Key, "\uFFFD")
		m = c2
	case c.m == "invalid-wrong-sentinel" && !utf8.ValidString(m.ID):
		return fmt.Errorf("memory: publish: %w: ID is not UTF-8", transport.ErrInvalidOption)
	case c.m == "invalid-unnamed" && !utf8.ValidString(m.ID):
		return fmt.Errorf("memory: publish: %w: cannot send this", transport.ErrInvalidMessage)
	case strings.HasSuffix(m.Topic, transport.DLQSuffix) && (c.m == "dlq-drops-header" || c.m == "dlq-record-group"):
		c2 := m.Clone()
		if c.m == "dlq-drops-header" {
			delete(c2.Headers, "X-Mixed-Case")
		} else {
			c2.Headers[transport.HeaderGroup] = "some-other-group"
		}
		m = c2
	}
	return c.Transport.Publish(ctx, m)
}

// Declare is the memory transport's, as the mutant declares it.
func (c *mutConn) Declare(sub transport.Subscription) (transport.Semantics, error) {
	if c.m == "unknown-option-accepted" {
		sub.Options = nil
	}
	sem, err := c.Transport.(transport.Declarer).Declare(sub)
	sem = mutate(c.m, sem)
	if c.m == "declare-lies" {
		sem.NackDelay = !sem.NackDelay
	}
	return sem, err
}

// ListDLQ is the memory transport's.
func (c *mutConn) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	return c.Transport.(transport.DeadLetters).ListDLQ(ctx, dlq, limit)
}

// ReplayDLQ is the memory transport's, with the replay mutants' bugs.
func (c *mutConn) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	ops := c.Transport.(transport.DeadLetters)
	switch c.m {
	case "replay-twice", "replay-keeps":
		msgs, err := ops.ListDLQ(ctx, dlq, 0)
		if err != nil {
			return 0, err
		}
		n := 0
		if c.m == "replay-twice" {
			if n, err = ops.ReplayDLQ(ctx, dlq, r); err != nil {
				return n, err
			}
		}
		for _, m := range msgs {
			if r.Selects(m) {
				if err := c.Transport.Publish(ctx, transport.StripDeadLetterHeaders(m, r.Destination(m))); err != nil {
					return n, err
				}
				if c.m == "replay-keeps" {
					n++
				}
			}
		}
		return n, nil
	}
	return ops.ReplayDLQ(ctx, dlq, r)
}

func (c *mutConn) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	switch c.m {
	case "group-private":
		sub.Group = ""
	case "replay-ignored":
		sub.StartAtOldest = false
	case "unknown-option-accepted":
		sub.Options = nil
	case "shared-group":
		if sub.Group != "" {
			return c.shared.join(ctx, c.Transport, sub)
		}
	}
	st, err := c.Transport.Subscribe(ctx, sub)
	if err != nil {
		return nil, err
	}
	return &mutStream{Stream: st, m: c.m, unsettled: make(map[*mutDelivery]bool), room: make(chan struct{}, 1)}, nil
}

// sharedGroups is the "shared-group" bug: the members of a group take
// turns on one stream, as MQTT shared subscriptions split a topic, while
// the transport declares per-topic order.
type sharedGroups struct {
	mu     sync.Mutex
	groups map[string]*sharedGroup
}

type sharedGroup struct {
	st    transport.Stream
	turn  chan struct{} // a token: who holds it may Receive
	refs  int
	owner *sharedGroups
	key   string
}

func newSharedGroups() *sharedGroups { return &sharedGroups{groups: make(map[string]*sharedGroup)} }

func (g *sharedGroups) join(ctx context.Context, t transport.Transport, sub transport.Subscription) (transport.Stream, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := sub.Topic + "\x00" + sub.Group
	sg := g.groups[key]
	if sg == nil {
		st, err := t.Subscribe(ctx, sub)
		if err != nil {
			return nil, err
		}
		sg = &sharedGroup{st: st, turn: make(chan struct{}, 1), owner: g, key: key}
		sg.turn <- struct{}{}
		g.groups[key] = sg
	}
	sg.refs++
	return &sharedMember{g: sg, done: make(chan struct{})}, nil
}

type sharedMember struct {
	g        *sharedGroup
	done     chan struct{}
	doneOnce sync.Once
}

func (m *sharedMember) Receive(ctx context.Context) (transport.Delivery, error) {
	select {
	case <-m.g.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.done:
		return nil, transport.ErrClosed
	}
	defer func() { m.g.turn <- struct{}{} }()
	return m.g.st.Receive(ctx)
}

func (m *sharedMember) Semantics() transport.Semantics {
	return mutate("shared-group", m.g.st.Semantics())
}

func (m *sharedMember) Close(ctx context.Context) error {
	last := false
	m.doneOnce.Do(func() {
		close(m.done)
		o := m.g.owner
		o.mu.Lock()
		m.g.refs--
		if m.g.refs == 0 {
			delete(o.groups, m.g.key)
			last = true
		}
		o.mu.Unlock()
	})
	if last {
		return m.g.st.Close(ctx)
	}
	return nil
}

type heldDelivery struct {
	d       transport.Delivery
	release int
}

type mutStream struct {
	transport.Stream
	m string

	n    int // deliveries so far; Receive is called from one goroutine
	held []heldDelivery
	dup  transport.Delivery

	mu        sync.Mutex
	unsettled map[*mutDelivery]bool
	closed    atomic.Bool
	room      chan struct{} // "window": a settle or Close happened
}

func (s *mutStream) Semantics() transport.Semantics { return mutate(s.m, s.Stream.Semantics()) }

// waitWindow blocks while the stream holds a delivery unsettled: the
// "window" stream keeps the MaxUnsettled of 1 it declares.
func (s *mutStream) waitWindow(ctx context.Context) error {
	for !s.closed.Load() {
		s.mu.Lock()
		n := len(s.unsettled)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-s.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *mutStream) wake() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}

func (s *mutStream) Receive(ctx context.Context) (transport.Delivery, error) {
	switch s.m {
	case "slow-cancel":
		ctx = context.WithoutCancel(ctx)
	case "duplicate":
		if s.dup != nil {
			d := s.dup
			s.dup = nil
			return d, nil
		}
	case "hold-back":
		return s.holdBack(ctx)
	case "window":
		if err := s.waitWindow(ctx); err != nil {
			return nil, err
		}
	}
	d, err := s.Stream.Receive(ctx)
	if err != nil {
		return nil, err
	}
	if s.m == "cancel-loses" {
		time.Sleep(time.Millisecond)
		if ctx.Err() != nil {
			_ = d.Ack(context.Background())
			return nil, ctx.Err()
		}
	}
	if s.m == "duplicate" {
		s.dup = &fakeDelivery{m: d.Message().Clone()}
	}
	md := s.wrap(d)
	if leased(s.m) {
		return newLeasedDelivery(md), nil
	}
	return md, nil
}

// holdBack returns every 7th delivery 30 deliveries late (or when the
// stream runs dry), reordering messages of one key.
func (s *mutStream) holdBack(ctx context.Context) (transport.Delivery, error) {
	for {
		s.n++
		if len(s.held) > 0 && s.held[0].release <= s.n {
			d := s.held[0].d
			s.held = s.held[1:]
			return d, nil
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if len(s.held) > 0 {
			rctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
		}
		d, err := s.Stream.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && len(s.held) > 0 {
				d := s.held[0].d
				s.held = s.held[1:]
				return d, nil
			}
			return nil, err
		}
		w := s.wrap(d)
		if s.n%7 == 0 {
			s.held = append(s.held, heldDelivery{w, s.n + 30})
			continue
		}
		return w, nil
	}
}

func (s *mutStream) wrap(d transport.Delivery) *mutDelivery {
	md := &mutDelivery{Delivery: d, s: s, msg: d.Message()}
	switch s.m {
	case "header-leak":
		c := md.msg.Clone()
		if c.Headers == nil {
			c.Headers = make(map[string]string)
		}
		c.Headers[transport.HeaderID] = c.ID
		md.msg = c
	case "key-scatter":
		if k, ok := md.msg.Headers[scatterKey]; ok {
			c := md.msg.Clone()
			c.Key = k
			delete(c.Headers, scatterKey)
			if len(c.Headers) == 0 {
				c.Headers = nil
			}
			md.msg = c
		}
	case "attempts-flat":
		c := md.msg.Clone()
		f := c.Facts()
		f.Attempt = 1
		c.SetFacts(f)
		md.msg = c
	}
	s.mu.Lock()
	s.unsettled[md] = true
	s.mu.Unlock()
	return md
}

func (s *mutStream) Close(ctx context.Context) error {
	s.closed.Store(true)
	s.wake()
	if s.m == "close-acks" {
		s.mu.Lock()
		ds := maps.Clone(s.unsettled)
		s.mu.Unlock()
		for d := range ds {
			_ = d.Ack(ctx)
		}
	}
	return s.Stream.Close(ctx)
}

type mutDelivery struct {
	transport.Delivery
	s       *mutStream
	msg     *handler.Message
	settled atomic.Bool
}

func (d *mutDelivery) Message() *handler.Message { return d.msg }

func (d *mutDelivery) settle() (again bool) {
	d.s.mu.Lock()
	delete(d.s.unsettled, d)
	d.s.mu.Unlock()
	d.s.wake()
	return d.settled.Swap(true)
}

func (d *mutDelivery) Ack(ctx context.Context) error {
	again := d.settle()
	if d.s.m == "revoke-plain-error" || d.s.m == "revoke-ack-succeeds" {
		return d.revokeBug(d.Delivery.Ack(ctx))
	}
	switch {
	case d.s.m == "ack-noop":
		if again {
			return transport.ErrSettled
		}
		return nil
	case d.s.m == "settle-twice-nil" && again:
		return nil
	}
	return d.Delivery.Ack(ctx)
}

func (d *mutDelivery) Nack(ctx context.Context, delay time.Duration) error {
	again := d.settle()
	switch {
	case d.s.m == "nack-acks":
		return d.Delivery.Ack(ctx)
	case d.s.m == "nack-no-delay":
		delay = 0
	case d.s.m == "settle-twice-nil" && again:
		return nil
	}
	return d.Delivery.Nack(ctx, delay)
}

// revokeBug turns a revocation into what the revoke mutants report: a
// plain error, or success.
func (d *mutDelivery) revokeBug(err error) error {
	if !errors.Is(err, transport.ErrRevoked) {
		return err
	}
	if d.s.m == "revoke-ack-succeeds" {
		return nil
	}
	return errors.New("memory: partition moved to another member")
}

// leasedDelivery is a delivery of the lease mutants: unless it is settled
// or extended within mutLease, the lease ends and the message goes back to
// the group (a Nack), as an SQS visibility timeout or a Redis claim does;
// its late settles then report the revocation.
type leasedDelivery struct {
	*mutDelivery
	mu      sync.Mutex
	timer   *time.Timer
	done    bool // settled, or its lease ended
	expired bool
}

func newLeasedDelivery(md *mutDelivery) *leasedDelivery {
	l := &leasedDelivery{mutDelivery: md}
	if md.s.m != "lease-ignored" {
		l.timer = time.AfterFunc(mutLease, l.expire)
	}
	return l
}

func (l *leasedDelivery) expire() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done, l.expired = true, true
	l.mu.Unlock()
	_ = l.mutDelivery.Nack(context.Background(), 0)
}

// finish ends the lease for a settle, or reports why it cannot be settled.
func (l *leasedDelivery) finish() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expired {
		return fmt.Errorf("lease ended: %w", transport.ErrRevoked)
	}
	l.done = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return nil
}

func (l *leasedDelivery) Ack(ctx context.Context) error {
	if err := l.finish(); err != nil {
		return err
	}
	return l.mutDelivery.Ack(ctx)
}

func (l *leasedDelivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := l.finish(); err != nil {
		return err
	}
	return l.mutDelivery.Nack(ctx, delay)
}

// Extend restarts the lease at d; in "extend-noop" it does nothing.
func (l *leasedDelivery) Extend(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.expired:
		return fmt.Errorf("lease ended: %w", transport.ErrRevoked)
	case l.done:
		return transport.ErrSettled
	case l.s.m == "extend-noop" || l.timer == nil:
		return nil
	}
	l.timer.Reset(d)
	return nil
}

// fakeDelivery is a second delivery of a message the broker delivered
// once: the "duplicate" bug.
type fakeDelivery struct {
	m       *handler.Message
	settled atomic.Bool
}

func (f *fakeDelivery) Message() *handler.Message { return f.m }

func (f *fakeDelivery) Ack(context.Context) error {
	if f.settled.Swap(true) {
		return transport.ErrSettled
	}
	return nil
}

func (f *fakeDelivery) Nack(context.Context, time.Duration) error { return f.Ack(context.Background()) }
