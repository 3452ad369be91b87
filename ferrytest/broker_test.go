package ferrytest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// What the simulated broker does, read from the traces of runs.

// effectOnly is a bare handler (no middleware) whose one effect is its
// work.
func effectOnly(s *ferrytest.Sim) {
	s.Input(orders(16, 4)...)
	s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(p *ferrytest.Process) (handler.Handler, error) {
		return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
			return s.Effect(ctx, "stock", m.ID)
		}), nil
	})
}

// firstDeliveries returns the IDs in the order of their first delivery.
func firstDeliveries(r *ferrytest.Run) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range r.Trace {
		if e.What == "deliver" && !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e.ID)
		}
	}
	return out
}

func num(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "evt-"))
	return n
}

// TestOrderingScopes: first deliveries keep publish order within the
// profile's scope (per key on kafka, the whole topic on mqtt), under every
// fault; across keys on kafka they do not, in some seed; and with Reorder
// off, nothing is reordered.
func TestOrderingScopes(t *testing.T) {
	crossed := false
	for seed := uint64(1); seed <= 200; seed++ {
		r := ferrytest.Replay(t, ferrytest.Like("kafka"), seed, effectOnly)
		last := map[int]int{} // key (n mod 4) → last event number first delivered
		prev := 0
		for _, id := range firstDeliveries(r) {
			n := num(id)
			k := (n - 1) % 4
			if n < last[k] {
				t.Fatalf("kafka seed %d: %s first delivered after evt-%d of its key", seed, id, last[k])
			}
			last[k] = n
			crossed = crossed || n < prev
			prev = n
		}
		r = ferrytest.Replay(t, ferrytest.Like("mqtt"), seed, effectOnly)
		prev = 0
		for _, id := range firstDeliveries(r) {
			if n := num(id); n < prev {
				t.Fatalf("mqtt seed %d: %s first delivered after evt-%d", seed, id, prev)
			} else {
				prev = n
			}
		}
		r = ferrytest.Replay(t, ferrytest.Like("sqs"), seed, effectOnly, ferrytest.Faults())
		for i, id := range firstDeliveries(r) {
			if num(id) != i+1 {
				t.Fatalf("sqs without faults, seed %d: delivery %d is %s", seed, i+1, id)
			}
		}
	}
	if !crossed {
		t.Fatal("in 200 seeds on kafka, no key overtook another")
	}
}

// TestNativeDLQ: a message the Router nacks for ever is moved to the DLQ
// by a broker with a delivery limit (RabbitMQ quorum queues), after that
// many deliveries, and counts as dead-lettered.
func TestNativeDLQ(t *testing.T) {
	p := ferrytest.Like("rabbitmq")
	r := ferrytest.Replay(t, p, 1, func(s *ferrytest.Sim) {
		s.Input(orders(3, 3)...)
		s.Consumer("stock", transport.Subscription{Topic: "orders"}, func(*ferrytest.Process) (handler.Handler, error) {
			return handler.HandlerFunc(func(context.Context, *handler.Message) error {
				return errors.New("the stock service is down")
			}), nil
		})
		s.Expect(ferrytest.NothingLost("stock", "stock", nil))
	}, ferrytest.Faults())
	if r.Violation != nil {
		t.Fatalf("%v", r.Violation)
	}
	if len(r.DeadLetters) != 3 {
		t.Fatalf("%d dead letters, want 3", len(r.DeadLetters))
	}
	for _, m := range r.DeadLetters {
		dl, ok := transport.ReadDeadLetter(m)
		if !ok || dl.Subscription != "stock" || dl.OriginalTopic != "orders" || m.Topic != "stock.dlq" {
			t.Errorf("dead letter %s on %s: %+v", m.ID, m.Topic, dl)
		}
		n := 0
		for _, e := range r.Events(m.ID) {
			if e.What == "deliver" {
				n++
			}
		}
		if n != p.DeliveryLimit {
			t.Errorf("%s delivered %d times, want the limit %d", m.ID, n, p.DeliveryLimit)
		}
	}
}

// TestOnReconnectRedeliversToTheSameMember: where the broker redelivers
// only to a reconnecting session (MQTT), a crashed process's message goes
// to that member's next process, never to the other member.
func TestOnReconnectRedeliversToTheSameMember(t *testing.T) {
	crashes := 0
	for seed := uint64(1); seed <= 100; seed++ {
		r := ferrytest.Replay(t, ferrytest.Like("mqtt"), seed, effectOnly, ferrytest.Faults(ferrytest.CrashBefore, ferrytest.CrashAfter))
		released := map[string]string{} // ID → member ("stock/1") whose process released it
		for _, e := range r.Trace {
			switch e.What {
			case "release":
				released[e.ID] = e.Process[:strings.IndexByte(e.Process, '#')]
				crashes++
			case "deliver":
				if m, ok := released[e.ID]; ok {
					if !strings.HasPrefix(e.Process, m+"#") {
						t.Fatalf("seed %d: %s, released by %s, redelivered to %s", seed, e.ID, m, e.Process)
					}
					delete(released, e.ID)
				}
			}
		}
	}
	if crashes == 0 {
		t.Fatal("no process crashed in 100 seeds")
	}
}

// TestEffectOutsideATurn: Effect and Point refuse a caller that is not a
// handler the simulator runs.
func TestEffectOutsideATurn(t *testing.T) {
	ferrytest.Replay(t, ferrytest.Like("memory"), 1, func(s *ferrytest.Sim) {
		if err := s.Effect(context.Background(), "stock", "evt-1"); !errors.Is(err, ferrytest.ErrNotInTurn) {
			t.Errorf("Effect in the scenario = %v, want ErrNotInTurn", err)
		}
		if err := s.Point(context.Background(), "read"); !errors.Is(err, ferrytest.ErrNotInTurn) {
			t.Errorf("Point in the scenario = %v, want ErrNotInTurn", err)
		}
	})
}
