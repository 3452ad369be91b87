package outbox_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
)

// TestOrdering: 100 orders × 5 events each, written by 10 concurrent
// producers in interleaved transactions while the relays run, arrive at the
// consumer in per-order order, with 1 relay and with several, with and
// without injected publish failures and unknown outcomes. No two publishes
// of one order ever overlap, across relays. Without faults, every event is
// published exactly once.
func TestOrdering(t *testing.T) {
	const orders, events = 100, 5
	for _, tc := range []struct {
		name   string
		relays int
		faults bool
	}{
		{"1-relay-faults", 1, true},
		{"3-relays-faults", 3, true},
		{"4-relays-clean", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newPool(t, 24)
			table := freshTable(t, db)
			ob, err := outbox.New(outbox.Table(table))
			if err != nil {
				t.Fatal(err)
			}
			b, err := memory.New(ctx, "memory://?partitions=4")
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)

			var fail func(m *handler.Message, tries int) error
			var injected, unknowns int
			if tc.faults {
				fail = func(m *handler.Message, tries int) error {
					if tries > 0 {
						return nil
					}
					switch h := hash(m.ID); {
					case h%7 == 0:
						return errFail
					case h%11 == 0:
						return errUnknown
					}
					return nil
				}
				for o := range orders {
					for e := range events {
						switch h := hash(orderID(o) + "/e" + strconv.Itoa(e)); {
						case h%7 == 0:
							injected++
						case h%11 == 0:
							unknowns++
						}
					}
				}
			}
			rec := newRecorder(b, fail)
			// Subscribe before anything is published: the group gets it all.
			st, err := b.Subscribe(ctx, transport.Subscription{Topic: "orders", Group: "check"})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(ctx)

			relays := runRelays(t, db, rec, tc.relays, outbox.Table(table), outbox.BatchSize(16),
				outbox.Backoff(time.Millisecond, 5*time.Millisecond), outbox.PollInterval(20*time.Millisecond),
				outbox.OnPublishError(func(*handler.Message, int, error) {}))

			// 10 producers, each owning 10 orders, writing their events one
			// transaction at a time, round-robin over their orders; every
			// third transaction writes two events.
			var wg sync.WaitGroup
			for p := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next := make([]int, 10)
					for done := 0; done < 10*events; {
						for i := range 10 {
							o := p*10 + i
							if next[i] == events {
								continue
							}
							msgs := []*handler.Message{event("orders", orderID(o), next[i])}
							next[i]++
							if (o+next[i])%3 == 0 && next[i] < events {
								msgs = append(msgs, event("orders", orderID(o), next[i]))
								next[i]++
							}
							done += len(msgs)
							addTx(t, db, ob, msgs...)
						}
					}
				}()
			}
			wg.Wait()

			// Consume every delivery expected: each event once, plus one
			// duplicate per unknown outcome. Then check nothing more comes.
			want := orders*events + unknowns
			seen := map[string][]int{} // order -> event numbers in arrival order
			distinct := map[string]bool{}
			received := 0
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			receive := func(ctx context.Context) error {
				d, err := st.Receive(ctx)
				if err != nil {
					return err
				}
				m := d.Message()
				n, _ := strconv.Atoi(m.Headers["seq"])
				seen[m.Key] = append(seen[m.Key], n)
				distinct[m.ID] = true
				received++
				return d.Ack(ctx)
			}
			for received < want {
				if err := receive(rctx); err != nil {
					t.Fatalf("received %d of %d (%d distinct): %v", received, want, len(distinct), err)
				}
			}
			waitFor(t, 5*time.Second, "all rows marked", func() bool { return pendingRows(t, db, table) == 0 })
			extra, cancelExtra := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancelExtra()
			if err := receive(extra); err == nil {
				t.Fatalf("a delivery beyond the %d expected arrived", want)
			}
			if len(distinct) != orders*events {
				t.Fatalf("%d distinct events, want %d", len(distinct), orders*events)
			}
			for o := range orders {
				got := seen[orderID(o)]
				for i := 1; i < len(got); i++ {
					if got[i] < got[i-1] {
						t.Fatalf("%s arrived out of order: %v", orderID(o), got)
					}
				}
				if len(got) == 0 || got[0] != 0 || got[len(got)-1] != events-1 {
					t.Fatalf("%s arrived as %v", orderID(o), got)
				}
			}
			if n := rec.overlaps(); n != 0 {
				t.Fatalf("%d publishes of one order overlapped (two relays held one key)", n)
			}
			var errs int64
			for _, r := range relays {
				s, err := r.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				errs += s.PublishErrors
			}
			// Every injected failure and unknown outcome cost one error.
			if errs != int64(injected+unknowns) {
				t.Fatalf("%d publish errors; want %d injected + %d unknown", errs, injected, unknowns)
			}
			t.Logf("%d relays: %d deliveries of %d events, %d publish errors (%d injected failures, %d unknown outcomes)",
				tc.relays, received, orders*events, errs, injected, unknowns)
		})
	}
}

func orderID(o int) string { return fmt.Sprintf("order-%03d", o) }

func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
