package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency/idempotencytest"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/pgstore"
)

const crashEnv = "FERRY_IDEM_CRASH" // mode,records,effects,namespace

// A consumer process is killed (SIGKILL) in the middle of an inbox
// message, and the message is delivered again to another consumer:
//   - killed after writing the effect, before the commit: the database
//     rolls back the claim and the effect together, and the redelivery
//     applies the effect, once;
//   - killed after the commit, before the ack: the redelivery is skipped
//     as a duplicate.
//
// Either way exactly one effect row exists.
func TestInboxCrash(t *testing.T) {
	for _, mode := range []string{"before-commit", "after-commit"} {
		t.Run(mode, func(t *testing.T) {
			h := newStoreHarness(t, true)
			ns := "crash-" + mode
			cmd := exec.Command(os.Args[0], "-test.run=^TestInboxCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(), crashEnv+"="+strings.Join([]string{mode, h.records, h.effects, ns}, ","))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"before-commit": "EFFECT-WRITTEN", "after-commit": "COMMITTED"}[mode]
			reached := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if strings.TrimSpace(sc.Text()) == want {
						reached <- true
						return
					}
				}
				reached <- false
			}()
			select {
			case ok := <-reached:
				if !ok {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("child exited without reaching %s", want)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("child never reached %s", want)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			eff := &rowEffects{h: h, ns: ns}
			before := eff.Counts(t)["evt-crash"]
			if wantRows := map[string]int{"before-commit": 0, "after-commit": 1}[mode]; before != wantRows {
				t.Fatalf("after the kill %d effect rows committed, want %d", before, wantRows)
			}

			// The broker redelivers the message to a surviving consumer.
			store, err := pgstore.NewInbox(h.db, pgstore.Table(h.records), pgstore.Namespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			var calls, skipped atomic.Int64
			mw := must(middleware.Dedupe(store, middleware.MaxInProgressDelay(50*time.Millisecond),
				middleware.OnDuplicate(func(*handler.Message, []byte) { skipped.Add(1) })))
			b := idempotencytest.NewBroker(t)
			const topic, name = "orders", "inventory"
			idempotencytest.Run(t, b, name, topic, mw(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				calls.Add(1)
				return eff.Apply(ctx, m)
			})))
			idempotencytest.Publish(t, b, idempotencytest.Order(topic, "evt-crash", "o-1"))
			idempotencytest.WaitFor(t, 20*time.Second, "the redelivery settled", func() bool {
				return idempotencytest.Lag(t, b, topic, name) == 0
			})
			wantCalls := map[string]int64{"before-commit": 1, "after-commit": 0}[mode]
			if calls.Load() != wantCalls || skipped.Load() != 1-wantCalls {
				t.Errorf("redelivery: handler called %d times, skipped %d; want %d and %d", calls.Load(), skipped.Load(), wantCalls, 1-wantCalls)
			}
			idempotencytest.CheckOnce(t, eff.Counts(t), []string{"evt-crash"})
		})
	}
}

// TestInboxCrashChild is the consumer TestInboxCrash kills. It does
// nothing unless started by it.
func TestInboxCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("run by TestInboxCrash")
	}
	parts := strings.Split(spec, ",")
	mode, records, effects, ns := parts[0], parts[1], parts[2], parts[3]
	db := pool(t)
	h := &storeHarness{db: db, records: records, effects: effects, inbox: true}
	eff := &rowEffects{h: h, ns: ns}
	store, err := pgstore.NewInbox(db, pgstore.Table(records), pgstore.Namespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	inner := must(middleware.Dedupe(store))(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if err := eff.Apply(ctx, m); err != nil {
			return err
		}
		if mode == "before-commit" {
			fmt.Println("EFFECT-WRITTEN")
			select {} // killed here, the transaction open
		}
		return nil
	}))
	b := idempotencytest.NewBroker(t)
	const topic, name = "orders", "inventory"
	idempotencytest.Run(t, b, name, topic, handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		err := inner.Handle(ctx, m)
		if err == nil {
			fmt.Println("COMMITTED")
			select {} // killed here, before the Router acks
		}
		return err
	}))
	idempotencytest.Publish(t, b, idempotencytest.Order(topic, "evt-crash", "o-1"))
	time.Sleep(30 * time.Second)
	t.Fatal("not killed")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
