package transporttest_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
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
	output string // text the failure must contain
}{
	{"none", "", ""},   // control: the wrapper alone passes the whole suite
	{"window", "", ""}, // control: a stream that enforces the MaxUnsettled of 1 it declares passes too
	{"hold-back", "Ordering/PerKey", "per-key order broken on the stream"},
	{"hold-back", "Ordering/PerKeyRouter", "per-key order broken"},
	{"ack-noop", "Ack", "was acked before the consumer left, but was delivered again"},
	{"ack-noop", "Router/Drain", "handled and acked by the draining Router, but came again"},
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
					t.Fatalf("the unmutated wrapper fails the suite:\n%s", out)
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
	transporttest.Run(t, mutHarness{inner: newMemoryHarness(t), m: m})
}

type mutHarness struct {
	inner memoryHarness
	m     string
}

func (h mutHarness) Open(tb testing.TB) transport.Transport {
	return &mutConn{Transport: h.inner.Open(tb), m: h.m}
}

type mutConn struct {
	transport.Transport
	m string
}

// scatterKey is where the "key-scatter" bug hides the real Key.
const scatterKey = "x-scatter-key"

var scatterN atomic.Int64

func (c *mutConn) Publish(ctx context.Context, m *handler.Message) error {
	if c.m == "key-scatter" && m.Key != "" {
		// Partition by a key that changes on every message, as if the
		// partitioner ignored the Key.
		c2 := m.Clone()
		if c2.Headers == nil {
			c2.Headers = make(map[string]string)
		}
		c2.Headers[scatterKey] = m.Key
		c2.Key = m.Key + "#" + strconv.FormatInt(scatterN.Add(1), 10)
		m = c2
	}
	return c.Transport.Publish(ctx, m)
}

func (c *mutConn) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	switch c.m {
	case "group-private":
		sub.Group = ""
	case "replay-ignored":
		sub.StartAtOldest = false
	}
	st, err := c.Transport.Subscribe(ctx, sub)
	if err != nil {
		return nil, err
	}
	return &mutStream{Stream: st, m: c.m, unsettled: make(map[*mutDelivery]bool), room: make(chan struct{}, 1)}, nil
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

func (s *mutStream) Semantics() transport.Semantics {
	sem := s.Stream.Semantics()
	switch s.m {
	case "maxpayload-lie":
		sem.MaxPayload = 1000
	case "declare-extend":
		sem.Extend = true
	case "declare-nativedlq":
		sem.NativeDLQ = true
	case "window", "declare-window":
		sem.MaxUnsettled = 1
	}
	return sem
}

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
	return s.wrap(d), nil
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
