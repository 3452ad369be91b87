package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// DelayedKey is the sorted set that holds the messages published with
// PublishAt until their time, for every topic of the Redis database: the
// score is the due time in Unix milliseconds, the member the message.
const DelayedKey = "ferry:delayed"

const (
	// delayPoll is how often a Transport moves due messages to their
	// streams.
	delayPoll = 100 * time.Millisecond
	// delayLease is how long a mover holds the messages it took before
	// another may take them again (it crashed before XADD and ZREM).
	delayLease = 30 * time.Second
	// delayBatch is how many due messages one move takes at most.
	delayBatch = 100
)

var _ transport.DelayPublisher = (*Transport)(nil)

// delayState is a Transport's mover of due messages (see PublishAt). The
// mover runs while the Transport is open and has published with
// PublishAt or holds an open stream: a Transport whose streams have all
// closed polls no more, as one that never subscribed, until it subscribes
// again.
type delayState struct {
	mu        sync.Mutex // before Transport.mu
	running   bool
	published bool // PublishAt was called: run until Close
}

// delayed is a message in DelayedKey.
type delayed struct {
	N       string            `json:"n"` // makes two equal messages two members
	Stream  string            `json:"s"` // the stream key (shard) the publisher chose
	ID      string            `json:"id"`
	Key     string            `json:"key,omitempty"`
	Topic   string            `json:"topic"`
	Payload []byte            `json:"payload,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// takeDue takes up to ARGV[3] members due by ARGV[1] and leases them: their
// score moves to ARGV[2], so another mover takes them only if this one does
// not remove them by then.
var takeDue = goredis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], m) end
return due`)

// DelaySemantics implements [transport.DelayPublisher]: any delay, late by
// at most a quarter second while a Transport on the database runs,
// durable as the Redis server's own persistence.
func (t *Transport) DelaySemantics() transport.DelaySemantics {
	return transport.DelaySemantics{Precision: 250 * time.Millisecond, Mechanism: "redis sorted set " + DelayedKey, Durable: true}
}

// PublishAt implements [transport.DelayPublisher]: it adds m to the sorted
// set [DelayedKey] (ZADD, scored by at) and returns once Redis confirmed.
// Every open Transport on the database that has published with PublishAt
// or has a stream open moves due messages to their streams, every 100ms: a Lua
// script takes the due ones and leases them for 30s, the Transport
// publishes each (XADD, as Publish, to the stream or shard the publisher
// chose) and then removes it (ZREM). So a
// message is published no sooner than at, by the clock of the publisher
// and the movers (keep them in sync); a mover that dies between the XADD
// and the ZREM leaves it to be published again after the lease
// (consumers dedupe by ID); several movers share the set without
// publishing one message twice otherwise. Messages wait in Redis, so they
// survive the restart of any consumer or publisher; when no Transport
// runs, they are published, late, when one starts.
//
// Errors Publish would return for m (no topic, too large) are returned
// now.
func (t *Transport) PublishAt(ctx context.Context, m *handler.Message, at time.Time) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if _, err := transport.CheckDelay(m, at, 0); err != nil {
		return err
	}
	a, err := t.xaddArgs(m)
	if err != nil {
		return err
	}
	var n [8]byte
	_, _ = rand.Read(n[:])
	b, err := json.Marshal(delayed{N: hex.EncodeToString(n[:]), Stream: a.Stream, ID: m.ID, Key: m.Key, Topic: m.Topic, Payload: m.Payload, Headers: m.Headers})
	if err != nil {
		return fmt.Errorf("redisstream: publish %q at %s: %w", m.ID, at.Format(time.RFC3339), err)
	}
	if err := t.c.ZAdd(ctx, DelayedKey, goredis.Z{Score: float64(at.UnixMilli()), Member: string(b)}).Err(); err != nil {
		return fmt.Errorf("redisstream: publish %q at %s on %s: %w", m.ID, at.Format(time.RFC3339), t.cfg.addr, err)
	}
	t.delay.start(t, true)
	return nil
}

// start starts t's mover unless it runs; published says the caller is
// PublishAt, which keeps it running until Close. Subscribe calls it after
// registering its stream in t.streams.
func (d *delayState) start(t *Transport, published bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.published = d.published || published
	if !d.running {
		d.running = true
		go t.moveDelayed()
	}
}

// idle reports whether the mover has nothing to run for (no PublishAt, no
// open stream) and, if so, marks it stopped, so that the next start starts
// another. A stream registered after idle looked finds it stopped.
func (d *delayState) idle(t *Transport) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.published {
		return false
	}
	t.mu.Lock()
	n := len(t.streams)
	t.mu.Unlock()
	if n > 0 {
		return false
	}
	d.running = false
	return true
}

// moveDelayed moves due messages to their streams until t closes, or
// until it has nothing to run for (delayState.idle).
func (t *Transport) moveDelayed() {
	tick := time.NewTicker(delayPoll)
	defer tick.Stop()
	for range tick.C {
		if t.closed.Load() || t.delay.idle(t) {
			return
		}
		for t.moveDue() == delayBatch && !t.closed.Load() {
		}
	}
}

// moveDue moves one batch of due messages and returns how many it took.
func (t *Transport) moveDue() int {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	now := time.Now()
	due, err := takeDue.Run(ctx, t.c, []string{DelayedKey},
		strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(now.Add(delayLease).UnixMilli(), 10), delayBatch).StringSlice()
	if err != nil {
		if !t.closed.Load() {
			t.log.Warn("redisstream: taking due delayed messages failed; retrying", "key", DelayedKey, "err", err)
		}
		return 0
	}
	for _, member := range due {
		var dm delayed
		if err := json.Unmarshal([]byte(member), &dm); err != nil {
			t.log.Error("redisstream: a delayed message cannot be read; removed", "key", DelayedKey, "err", err)
			_ = t.c.ZRem(ctx, DelayedKey, member).Err()
			continue
		}
		m := &handler.Message{ID: dm.ID, Key: dm.Key, Topic: dm.Topic, Payload: dm.Payload, Headers: dm.Headers}
		// The publisher's shard, whatever this Transport's shards are.
		x := new(xadd)
		err := t.build(x, m, dm.Stream)
		if err == nil {
			err = t.batchErr(m.Topic, t.pub.Add(ctx, pubItem{x: x}))
		}
		if err != nil {
			if !t.closed.Load() {
				t.log.Warn("redisstream: publishing a due delayed message failed; it is tried again after the lease",
					"id", m.ID, "topic", m.Topic, "lease", delayLease, "err", err)
			}
			continue
		}
		if err := t.c.ZRem(ctx, DelayedKey, member).Err(); err != nil && !t.closed.Load() {
			t.log.Warn("redisstream: removing a published delayed message failed; it is published again after the lease",
				"id", m.ID, "topic", m.Topic, "err", err)
		}
	}
	return len(due)
}
