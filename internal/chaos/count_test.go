package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// uniqueRun is a fresh run name: eight hex digits.
func uniqueRun() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// eventID is the ID of key's event seq in run.
func eventID(run string, key, seq int) string { return fmt.Sprintf("%s-k%03d-%05d", run, key, seq) }

// publish sends keys*perKey events, each key's in order (seq 1, 2, …):
// workers take disjoint keys, and publish a key's next event only once the
// broker confirmed the one before. A failed publish is sent again, same ID,
// until it succeeds (the caller owns the backoff). Every 97th event is
// published twice, as a producer that retried after a timeout would. With
// rate > 0 the events are spread at rate per second, so that the faults
// happen while the producer is still producing.
func publish(pub transport.Publisher, topic, run string, keys, perKey, rate int, published *atomic.Int64) error {
	workers := min(keys, 16)
	start := time.Now()
	var taken atomic.Int64
	pace := func() {
		if rate <= 0 {
			return
		}
		n := taken.Add(1)
		if d := time.Until(start.Add(time.Duration(n) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for seq := 1; seq <= perKey; seq++ {
				for key := w; key < keys; key += workers {
					body, _ := json.Marshal(event{Key: fmt.Sprintf("k%03d", key), Seq: seq})
					m := &handler.Message{ID: eventID(run, key, seq), Key: fmt.Sprintf("k%03d", key), Topic: topic, Payload: body}
					copies := 1
					if (key*perKey+seq)%97 == 0 {
						copies = 2
					}
					pace()
					for range copies {
						if err := publishOne(pub, m); err != nil {
							errs <- err
							return
						}
						published.Add(1)
						n++
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// publishOne publishes m until the broker confirms it, for at most five
// minutes (a broker restart takes seconds; a RabbitMQ node's, here, up to
// a minute).
func publishOne(pub transport.Publisher, m *handler.Message) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := pub.Publish(ctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrTooLarge) || time.Now().After(deadline) {
			return fmt.Errorf("publish %s: %w", m.ID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tallyEffects reads the run's effects, in the order they were written,
// and counts: lost (an event with no effect), duplicates (effects beyond
// the first of an event), order violations (a first effect of a key whose
// seq is below one already applied for that key), parked messages, and the
// longest pause between two first effects (how long a fault stopped the
// stream).
func tallyEffects(t *testing.T, pool *pgxpool.Pool, run string, sc scenario, res *result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT key, seq, id, at, pid FROM ferry_chaos_effects WHERE run = $1 ORDER BY n`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := make(map[string]bool)
	highest := make(map[string]int)
	highestBy := make(map[string]int) // the pid that applied highest[key]
	var firsts []time.Time
	for rows.Next() {
		var (
			key, id string
			seq     int
			at      time.Time
			pid     int
		)
		if err := rows.Scan(&key, &seq, &id, &at, &pid); err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			res.Duplicates++
			continue
		}
		seen[id] = true
		firsts = append(firsts, at)
		if at.After(res.lastEffect) {
			res.lastEffect = at
		}
		if seq < highest[key] {
			res.OrderViolations++
			if res.OrderViolations <= 10 {
				t.Logf("order violation: %s (key %s, seq %d) first applied at %s by pid %d, after seq %d of its key (applied by pid %d)",
					id, key, seq, at.Format(time.RFC3339Nano), pid, highest[key], highestBy[key])
			}
		}
		if seq > highest[key] {
			highest[key], highestBy[key] = seq, pid
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(firsts, time.Time.Compare)
	for i := 1; i < len(firsts); i++ {
		res.MaxGapSeconds = max(res.MaxGapSeconds, firsts[i].Sub(firsts[i-1]).Seconds())
	}
	for key := range sc.keys {
		for seq := 1; seq <= sc.perKey; seq++ {
			if id := eventID(run, key, seq); !seen[id] {
				res.Lost++
				if res.Lost <= 10 {
					t.Logf("lost: %s", id)
				}
			}
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ferry_parking_messages WHERE subscription = $1`, "chaos-"+run).Scan(&res.Parked); err != nil {
		t.Logf("parked: %v (counted 0)", err)
	}
}

// cleanupPostgres removes the run's rows.
func cleanupPostgres(pool *pgxpool.Pool, cfg consumerConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = pool.Exec(ctx, `DELETE FROM ferry_chaos_effects WHERE run = $1`, cfg.Run)
	_, _ = pool.Exec(ctx, `DELETE FROM ferry_idempotency WHERE namespace = $1`, cfg.Run)
	_, _ = pool.Exec(ctx, `DELETE FROM ferry_parking_messages WHERE subscription = $1`, cfg.Sub)
	_, _ = pool.Exec(ctx, `DELETE FROM ferry_parking_keys WHERE subscription = $1`, cfg.Sub)
}

// resultsEnv names a file that each run appends its result to, as a JSON
// line (docs/reliability.md's table is made from it).
const resultsEnv = "FERRY_CHAOS_RESULTS"

// record logs res, and appends it to $FERRY_CHAOS_RESULTS if set.
func record(t *testing.T, res result) {
	t.Helper()
	t.Log(res.String())
	path := os.Getenv(resultsEnv)
	if path == "" {
		return
	}
	line, _ := json.Marshal(res)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("results: %v", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}
