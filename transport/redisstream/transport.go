package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
)

// Scheme and SchemeTLS are the URL schemes this package registers.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

// ErrLeaseLost is returned (wrapped) by Extend, Ack and Nack on a delivery
// whose entry is no longer pending for this consumer: another member took
// it over after its lease ran out. It wraps [transport.ErrRevoked]. The
// handler's work may be repeated elsewhere; finishing it is still safe, as
// consumers dedupe.
var ErrLeaseLost = fmt.Errorf("redisstream: entry no longer owned by this consumer: %w", transport.ErrRevoked)

// Transport is a connection to one Redis server that publishes to and
// subscribes on streams. It implements [transport.Transport],
// [transport.Declarer], [transport.BatchPublisher], [transport.AsyncPublisher],
// [transport.DeadLetters], [transport.DLQNamer] and
// [transport.LagReporter]. All methods may be called concurrently.
type Transport struct {
	// c carries publishes, acks, leases and operator calls; go-redis
	// retries its commands on a broken connection.
	c *goredis.Client
	// rc carries the commands that must not be sent twice and never
	// retries them: those that move entries into a consumer's pending list
	// (XREADGROUP of the pending list and of takeovers, XAUTOCLAIM), so
	// that a lost reply surfaces as an error and the stream re-reads its
	// own pending entries before new ones (fetch.go), and the XADDs of
	// publishes, so that a lost reply is reported as an unknown outcome
	// instead of writing a second entry. Each stream reads new entries
	// over a connection of its own, which never retries either
	// (readconn.go).
	rc   *goredis.Client
	pub  *batch.Batcher[pubItem] // publish.go
	cmds []goredis.Cmder         // send's, on the batcher's one handler goroutine
	cfg  config
	log  *slog.Logger

	rr     atomic.Uint32 // round robin over shards for keyless messages
	closed atomic.Bool

	mu      sync.Mutex
	streams map[*stream]struct{}

	trimmed      atomic.Int64
	deadLettered atomic.Int64
	delay        delayState // delay.go
}

// New connects to the Redis server of rawURL (redis://… or rediss://…; see
// the package doc for its query keys), applies opts after the URL's keys,
// and checks the connection with PING, bounded by ctx and, at each step
// (dial, TLS handshake, reply), by [Timeout]. A bad URL or option returns
// an error wrapping [transport.ErrInvalidOption] that names it; refused
// credentials an error wrapping [ErrAuth]; any other failure says which
// step failed against which host. No error holds a credential.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	c := goredis.NewClient(cfg.clientOptions(0))
	rc := goredis.NewClient(cfg.clientOptions(-1))
	// The PING goes over the client that never retries, so that the first
	// failure is the one reported, not a later "context deadline exceeded".
	if err := rc.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		_ = rc.Close()
		return nil, connectErr(cfg.addr, cfg.tls != nil, cfg.timeout, err)
	}
	t := &Transport{c: c, rc: rc, cfg: cfg, log: cfg.log, streams: make(map[*stream]struct{})}
	if t.pub, err = t.newPublisher(); err != nil {
		_ = c.Close()
		_ = rc.Close()
		return nil, fmt.Errorf("redisstream: publisher: %w", err)
	}
	return t, nil
}

// Client returns the underlying go-redis client, for operations this
// package does not cover. Do not close it; close the Transport.
func (t *Transport) Client() *goredis.Client { return t.c }

// Stats are counters of the transport's own decisions.
type Stats struct {
	// Trimmed counts pending entries whose data was gone (trimmed by MAXLEN
	// or MINID, or XDELed) when a member tried to take them over; Redis
	// drops them from the pending list and they are never delivered again.
	Trimmed int64
	// DeadLettered counts entries moved to a DLQ after MaxDeliveries.
	DeadLettered int64
}

// Stats returns the counters.
func (t *Transport) Stats() Stats {
	return Stats{Trimmed: t.trimmed.Load(), DeadLettered: t.deadLettered.Load()}
}

// streamsOf returns the stream keys of a logical topic.
func (t *Transport) streamsOf(topic string) []string {
	n := t.cfg.shards
	keys := make([]string, n)
	for i := range keys {
		keys[i] = StreamKey(topic, n, i)
	}
	return keys
}

// Declare returns the Semantics that Subscribe(sub) would declare, without
// touching Redis, or an error wrapping [transport.ErrInvalidOption] for a
// sub that Subscribe would refuse.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	if sub.Topic == "" {
		return transport.Semantics{}, fmt.Errorf("%w: redisstream: subscribe: empty topic", transport.ErrInvalidOption)
	}
	cc, err := t.subscriptionConfig(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return t.semantics(cc), nil
}

// orderingHint is what Semantics.OrderingHint says in shared mode.
const orderingHint = "mode=exclusive (the default: one active member per stream), with shards=N for N active members"

// semantics is what a stream with cc declares.
func (t *Transport) semantics(cc consumeConfig) transport.Semantics {
	ordering, hint := transport.OrderNone, orderingHint
	wait := cc.claimInterval
	if cc.mode == ModeExclusive {
		ordering, hint = transport.OrderPerKey, ""
		if t.cfg.shards == 1 {
			ordering = transport.OrderPerTopic
		}
		wait = max(wait, leaseTick(cc.lease))
	}
	return transport.Semantics{
		Transport:       Scheme,
		Ordering:        ordering,
		OrderingHint:    hint,
		Ack:             transport.AckPerMessage,
		Redelivery:      transport.RedeliverOnNack,
		NackDelay:       true,
		Attempts:        true,
		Extend:          true,
		NativeDLQ:       cc.maxDeliveries > 0,
		FanOut:          true,
		Replay:          true,
		Headers:         true,
		MaxPayload:      t.cfg.maxPayload,
		RedeliveryDelay: wait + cc.block + 250*time.Millisecond,
	}
}

// DLQName returns the DLQ stream of sub's group: the [DeadLetter] name
// (from the URL, the options or sub.Options) with "{topic}" replaced, else
// the default rule of [transport.DLQName]. A DLQ is a topic like any other,
// split into the transport's shards.
func (t *Transport) DLQName(sub transport.Subscription) string {
	name := t.cfg.consume.deadLetter
	if cc, err := t.subscriptionConfig(sub); err == nil {
		name = cc.deadLetter
	}
	if name != "" {
		return strings.ReplaceAll(name, "{topic}", sub.Topic)
	}
	return transport.DLQName(nil, sub) // the default rule: this is no DLQNamer
}

// Subscribe opens sub: it creates the group on every stream of the topic
// (XGROUP CREATE … MKSTREAM, from "$", or "0" with StartAtOldest; an
// existing group is kept as it is) and, in exclusive mode, joins the
// group's members and waits briefly for its share of the shards. ctx
// bounds the opening only.
//
// sub.Group defaults to "ferry"; sub.Consumer to a name unique to this
// stream. sub.Options takes the consume keys (mode, count, block,
// claim_idle, claim_interval, max_extend, lease, max_deliveries,
// dead_letter); any other key is an error wrapping
// [transport.ErrInvalidOption].
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	if _, err := t.Declare(sub); err != nil {
		return nil, err
	}
	cc, _ := t.subscriptionConfig(sub)
	s, err := newStream(t, sub, cc)
	if err != nil {
		return nil, err
	}
	start := "$"
	if sub.StartAtOldest {
		start = "0"
	}
	for _, sh := range s.shards {
		if err := t.c.XGroupCreateMkStream(ctx, sh.key, s.group, start).Err(); err != nil && !isBusyGroup(err) {
			_ = s.acks.close(ctx)
			return nil, fmt.Errorf("redisstream: subscribe %q: create group %q on %q on %s: %w", sub.Topic, s.group, sh.key, t.cfg.addr, err)
		}
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		_ = s.acks.close(ctx)
		return nil, transport.ErrClosed
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	s.start(ctx)
	t.delay.start(t, false) // delay.go: consumers move due delayed messages
	return s, nil
}

func isBusyGroup(err error) bool { return goredis.HasErrorPrefix(err, "BUSYGROUP") }

// isNoGroup reports whether err is Redis's NOGROUP, the stream or the
// group missing, as a command's reply or inside a script's error.
func isNoGroup(err error) bool {
	var rerr goredis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "NOGROUP")
}

func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
}

// Close closes every stream opened on t (releasing their unsettled
// deliveries and flushing their acks), then the connection pools. ctx
// bounds the wait. A second Close does nothing and returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	t.mu.Lock()
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.pub.Close(ctx); err != nil { // publishes in flight get their replies
		errs = append(errs, err)
	}
	if err := t.rc.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := t.c.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// consumerName returns a name unique to one stream of this process.
func consumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.DLQNamer       = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)
