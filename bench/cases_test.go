package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/store/redisstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// rounds is how many interleaved rounds each case runs; the figures are
// medians over them.
const rounds = 5

// side is one contender of a comparison: how many messages a round of it
// handles, and the handler chain (made per round, so that stores start
// each round alike) with the subscription's options.
type side struct {
	name string
	n    int
	make func(b *testing.B, br *memory.Transport, done func(m *handler.Message)) (handler.Handler, []ferry.SubscriptionOption)
	// batch, when set instead of make, runs the side through
	// Router.AddBatch: per-message middleware, the batch handler, options.
	batch func(b *testing.B, br *memory.Transport, done func(m *handler.Message)) (handler.Middleware, handler.BatchHandler, []ferry.SubscriptionOption)
}

// outcome is one round of one side.
type outcome struct {
	rate   float64 // messages per second
	allocs float64 // heap allocations per message, the whole process
	cpu    float64 // CPU µs per message, this process (not a store's server)
}

// round publishes n messages (keys key(i), IDs id(i)) to a fresh memory
// transport with partitions partitions, untimed, then times a Router
// consuming them through s's chain until its innermost handler has seen
// all n.
func round(b *testing.B, s side, r, partitions, keys int) outcome {
	ctx := context.Background()
	br, err := memory.New(ctx, fmt.Sprintf("memory://?partitions=%d", partitions))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(ctx)
	payload := make([]byte, 1024)
	for i := range s.n {
		m := &handler.Message{ID: fmt.Sprintf("r%d-%s-%d", r, s.name, i), Key: "order-" + strconv.Itoa(i%keys), Topic: "orders", Payload: payload}
		if err := br.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	var count atomic.Int64
	finished := make(chan struct{})
	done := func(*handler.Message) {
		if count.Add(1) == int64(s.n) {
			close(finished)
		}
	}
	rt, err := ferry.NewRouter()
	if err != nil {
		b.Fatal(err)
	}
	spec := transport.Subscription{Topic: "orders", Group: "bench", StartAtOldest: true}
	if s.batch != nil {
		mw, bh, opts := s.batch(b, br, done)
		err = rt.AddBatch("bench", br, spec, mw, bh, opts...)
	} else {
		h, opts := s.make(b, br, done)
		err = rt.Add("bench", br, spec, h, opts...)
	}
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	m := benchstat.Start()
	go rt.Run(ctx)
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%s: %d of %d messages handled in 2 minutes", s.name, count.Load(), s.n)
	}
	spent := m.Since()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rt.Close(closeCtx); err != nil {
		b.Fatal(err)
	}
	rate, cpu, allocs := spent.PerMsg(s.n)
	return outcome{rate, allocs, cpu}
}

// compare runs every side once per round, rotating which goes first, and
// reports each side's median rate and allocations per message, and the
// median over the rounds of each side's ratio to the first side.
func compare(b *testing.B, partitions, keys int, sides ...side) {
	rates := make([][]float64, len(sides))
	allocs := make([][]float64, len(sides))
	cpus := make([][]float64, len(sides))
	for r := range rounds {
		for j := range sides {
			k := (j + r) % len(sides)
			o := round(b, sides[k], r, partitions, keys)
			rates[k] = append(rates[k], o.rate)
			allocs[k] = append(allocs[k], o.allocs)
			cpus[k] = append(cpus[k], o.cpu)
		}
	}
	for k, s := range sides {
		b.ReportMetric(benchstat.Median(rates[k]), s.name+"-msgs/s")
		b.ReportMetric(benchstat.Median(allocs[k]), s.name+"-allocs/msg")
		b.ReportMetric(benchstat.Median(cpus[k]), s.name+"-cpu-µs/msg")
		if k > 0 {
			ratios := make([]float64, rounds)
			for r := range rounds {
				ratios[r] = rates[k][r] / rates[0][r]
			}
			b.ReportMetric(benchstat.Median(ratios), s.name+"/"+sides[0].name)
		}
	}
	var log strings.Builder
	for k, s := range sides {
		fmt.Fprintf(&log, "%s %v msg/s; ", s.name, benchstat.Rounded(rates[k]))
	}
	b.Log(log.String())
}

// plain is a side whose chain is a no-op handler wrapped by mw (nil: none).
func plain(name string, n int, mw func(b *testing.B, br *memory.Transport) handler.Middleware, opts ...ferry.SubscriptionOption) side {
	return side{name: name, n: n, make: func(b *testing.B, br *memory.Transport, done func(*handler.Message)) (handler.Handler, []ferry.SubscriptionOption) {
		var h handler.Handler = handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
			done(m)
			return nil
		})
		if mw != nil {
			h = mw(b, br)(h)
		}
		return h, opts
	}}
}

// BenchmarkPerKeyConcurrency is the case where per-key concurrency pays:
// a handler that takes 5 ms (a database call), one partition, 100 keys,
// the Router with 64 workers against one (the most a partition consumer
// of Watermill or raw sarama has in flight), each handler checking that
// its key's messages arrive in publish order. One worker handles fewer
// messages per round (its rounds would last seconds); rates compare.
func BenchmarkPerKeyConcurrency(b *testing.B) {
	var misordered atomic.Int64
	ordered := func(name string, n, workers int) side {
		return side{name: name, n: n, make: func(b *testing.B, _ *memory.Transport, done func(*handler.Message)) (handler.Handler, []ferry.SubscriptionOption) {
			var mu sync.Mutex
			last := map[string]int{}
			return handler.HandlerFunc(func(_ context.Context, m *handler.Message) error {
				seq, err := strconv.Atoi(m.ID[strings.LastIndexByte(m.ID, '-')+1:])
				if err != nil {
					return err
				}
				mu.Lock()
				if prev, ok := last[m.Key]; ok && seq <= prev {
					misordered.Add(1)
				}
				last[m.Key] = seq
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				done(m)
				return nil
			}), []ferry.SubscriptionOption{ferry.PerKey(), ferry.Concurrency(workers), ferry.MaxInFlight(1024)}
		}}
	}
	compare(b, 1, 100, ordered("1worker", 200, 1), ordered("64workers", 3000, 64))
	if n := misordered.Load(); n != 0 {
		b.Fatalf("%d messages handled before an earlier message of their key", n)
	}
}

// BenchmarkRecommendedStack measures the Router on the memory transport
// with a no-op handler, bare and wrapped in middleware.Recommended
// (DeadLetter → Retry → Timeout → Recover, the success path only), over
// 1,000 keys with per-key order: issue 21's aim is 1 M msg/s for the stack.
func BenchmarkRecommendedStack(b *testing.B) {
	recommended := func(b *testing.B, br *memory.Transport) handler.Middleware {
		mw, err := middleware.Recommended(br)
		if err != nil {
			b.Fatal(err)
		}
		return mw
	}
	compare(b, 8, 1000, plain("bare", 300000, nil), plain("recommended", 300000, recommended))
}

// BenchmarkDedupeCost measures middleware.Recommended with Deduplicate on
// the memory transport (16 workers, 1,000 keys, every message new): no
// store, the in-memory store, the Redis store and the PostgreSQL Inbox
// (a transaction per message, the handler's effects in it), and the
// Inbox on the batch path (Router.AddBatch, DedupeBatch: one transaction
// per batch of up to 100). Each
// handles its own number of messages per round (the stores' speeds
// differ by orders of magnitude); the ratios are to no dedupe.
func BenchmarkDedupeCost(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b, 40)
	table := strings.ReplaceAll(transporttest.UniqueName(b, "bench_inbox"), "-", "_")
	if err := pgstore.MigrateIdempotency(ctx, pool, table); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	rc := testenv.Redis(b)
	prefix := "ferry:bench:" + transporttest.UniqueName(b, "dedupe") + ":"
	with := func(store func(b *testing.B) (middleware.StackOption, error)) func(b *testing.B, br *memory.Transport) handler.Middleware {
		return func(b *testing.B, br *memory.Transport) handler.Middleware {
			var opts []middleware.StackOption
			if store != nil {
				o, err := store(b)
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, o)
			}
			mw, err := middleware.Recommended(br, opts...)
			if err != nil {
				b.Fatal(err)
			}
			return mw
		}
	}
	mem := func(*testing.B) (middleware.StackOption, error) {
		s, err := memstore.NewStore()
		return middleware.Deduplicate(s), err
	}
	red := func(*testing.B) (middleware.StackOption, error) {
		s, err := redisstore.NewStore(rc, redisstore.Prefix(prefix), redisstore.TTL(5*time.Minute))
		return middleware.Deduplicate(s), err
	}
	pg := func(*testing.B) (middleware.StackOption, error) {
		s, err := pgstore.NewInbox(pool, pgstore.Table(table))
		return middleware.Deduplicate(s), err
	}
	// The batch path: Router.AddBatch with DedupeBatch on the Inbox, every
	// claim of a batch (up to 100) in one transaction and one commit.
	pgBatch := side{name: "pginbox-batch", n: 20000, batch: func(b *testing.B, br *memory.Transport, done func(*handler.Message)) (handler.Middleware, handler.BatchHandler, []ferry.SubscriptionOption) {
		s, err := pgstore.NewInbox(pool, pgstore.Table(table))
		if err != nil {
			b.Fatal(err)
		}
		dd, err := middleware.DedupeBatch(s)
		if err != nil {
			b.Fatal(err)
		}
		mw, err := middleware.Recommended(br)
		if err != nil {
			b.Fatal(err)
		}
		bh := dd(handler.BatchHandlerFunc(func(_ context.Context, msgs []*handler.Message) error {
			for _, m := range msgs {
				done(m)
			}
			return nil
		}))
		return mw, bh, []ferry.SubscriptionOption{ferry.Concurrency(16), ferry.BatchSize(100)}
	}}
	opts := []ferry.SubscriptionOption{ferry.Concurrency(16)}
	compare(b, 8, 1000,
		plain("none", 100000, with(nil), opts...),
		plain("memstore", 100000, with(mem), opts...),
		plain("redisstore", 5000, with(red), opts...),
		plain("pginbox", 3000, with(pg), opts...),
		pgBatch)
}

// BenchmarkParkingCost measures middleware.Recommended with Parking on the
// memory transport (16 workers, 1,000 keys, per-key order) when no key
// is parked, the case of every healthy message: no lot, the in-memory
// lot, the Redis lot and the PostgreSQL lot, at their defaults (no
// CacheFor), 100,000 messages each. The Redis and PostgreSQL lots answer
// from memory, told of every change by their store (parking.Watcher), so
// no side makes a round trip per message. The ratios are to no parking.
func BenchmarkParkingCost(b *testing.B) {
	ctx := context.Background()
	pool := testenv.Postgres(b, 40)
	pfx := strings.ReplaceAll(transporttest.UniqueName(b, "bench_lot"), "-", "_")
	if err := pgstore.MigrateParking(ctx, pool, pfx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, t := range []string{"_audit", "_messages", "_keys", "_versions"} {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pfx+t+" CASCADE")
		}
	})
	rc := testenv.Redis(b)
	rpfx := "ferry:bench:" + transporttest.UniqueName(b, "park") + ":"
	b.Cleanup(func() {
		iter := rc.Scan(context.Background(), 0, rpfx+"*", 1000).Iterator()
		for iter.Next(context.Background()) {
			rc.Del(context.Background(), iter.Val())
		}
	})
	with := func(parkWith func() (middleware.StackOption, error)) func(b *testing.B, br *memory.Transport) handler.Middleware {
		return func(b *testing.B, br *memory.Transport) handler.Middleware {
			var opts []middleware.StackOption
			if parkWith != nil {
				o, err := parkWith()
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, o)
			}
			mw, err := middleware.Recommended(br, opts...)
			if err != nil {
				b.Fatal(err)
			}
			return mw
		}
	}
	// One lot of each kind serves every round (a lot with nothing parked
	// starts each round alike). A watching lot (Redis, PostgreSQL) is
	// timed only once it answers from memory: its start-up (subscribing
	// to notifications, the first read of the keys) is not the per-message
	// cost the case measures. Each is closed before its client.
	lot := func(l parking.Lot, err error) func() (middleware.StackOption, error) {
		if err != nil {
			b.Fatal(err)
		}
		if w, ok := l.(parking.Watcher); ok {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, ok := w.Parked("bench", "warm-up"); ok {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%T never answered from memory within 10s", l)
				}
				if _, _, _, err := l.Snapshot(ctx, "bench", -1); err != nil {
					b.Fatal(err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if c, ok := l.(interface{ Close() error }); ok {
			b.Cleanup(func() { _ = c.Close() })
		}
		return func() (middleware.StackOption, error) { return middleware.Parking(l), nil }
	}
	mem := lot(memstore.NewLot())
	red := lot(redisstore.NewLot(rc, redisstore.Prefix(rpfx)))
	pg := lot(pgstore.NewLot(pool, pgstore.TablePrefix(pfx)))
	opts := []ferry.SubscriptionOption{ferry.Concurrency(16), ferry.PerKey()}
	compare(b, 8, 1000,
		plain("none", 100000, with(nil), opts...),
		plain("memlot", 100000, with(mem), opts...),
		plain("redislot", 100000, with(red), opts...),
		plain("pglot", 100000, with(pg), opts...))
}
