package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Scheme and SchemeTLS are the URL schemes this package registers.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

// ErrLeaseLost is returned (wrapped) by Extend when the entry is no longer
// pending for this consumer: another member took it over after its lease
// ran out, or it was acked or trimmed. The handler's work may be repeated
// elsewhere; finishing it is still safe, as consumers dedupe.
var ErrLeaseLost = errors.New("redisstream: entry no longer owned by this consumer")

func init() {
	transport.Register(Scheme, URLOpener{})
	transport.Register(SchemeTLS, URLOpener{})
}

// URLOpener opens redis:// and rediss:// URLs; see the package doc for the
// query keys.
type URLOpener struct{}

// OpenURL opens a Transport from u.
func (URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	o, err := optionsFromURL(u)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

// Transport is a connection to one Redis server (a go-redis client with its
// pool) that publishes to and subscribes on streams. It implements
// [transport.Transport], [transport.BatchPublisher],
// [transport.DeadLetters] and [transport.LagReporter]. All methods may be
// called concurrently.
type Transport struct {
	c    *goredis.Client
	opts Options
	log  *slog.Logger

	rr     atomic.Uint32 // round robin over shards for keyless messages
	closed atomic.Bool

	mu      sync.Mutex
	streams map[*stream]struct{}

	trimmed      atomic.Int64
	deadLettered atomic.Int64
}

// New connects to Redis with o and checks the connection with PING, bounded
// by ctx. Invalid options are an error wrapping [transport.ErrInvalidOption].
func New(ctx context.Context, o Options) (*Transport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Consume = o.Consume.withDefaults()
	c := goredis.NewClient(&goredis.Options{
		Addr:       o.Addr,
		Username:   o.Username,
		Password:   o.Password,
		DB:         o.DB,
		PoolSize:   o.PoolSize,
		TLSConfig:  o.TLS,
		ClientName: o.ClientName,
		Protocol:   2,
	})
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisstream: connect %s: %w", o.Addr, err)
	}
	return &Transport{c: c, opts: o, log: o.Logger, streams: make(map[*stream]struct{})}, nil
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
	// DeadLettered counts entries moved to a dead-letter stream after
	// MaxDeliveries.
	DeadLettered int64
}

// Stats returns the counters.
func (t *Transport) Stats() Stats {
	return Stats{Trimmed: t.trimmed.Load(), DeadLettered: t.deadLettered.Load()}
}

// streamsOf returns the stream keys of a logical topic.
func (t *Transport) streamsOf(topic string) []string {
	n := t.opts.topicOptions(topic).Shards
	if n == 0 {
		return []string{topic}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = StreamKey(topic, n, i)
	}
	return keys
}

// xaddArgs builds the XADD of m, with the topic's trimming and shard.
func (t *Transport) xaddArgs(m *handler.Message) (*goredis.XAddArgs, error) {
	if m.Topic == "" {
		return nil, invalid("publish: empty topic")
	}
	if len(m.Payload) > t.opts.MaxPayload {
		return nil, fmt.Errorf("redisstream: publish %q: payload of %d bytes, max_payload %d: %w",
			m.Topic, len(m.Payload), t.opts.MaxPayload, transport.ErrTooLarge)
	}
	vals, err := encode(m)
	if err != nil {
		return nil, err
	}
	to := t.opts.topicOptions(m.Topic)
	a := &goredis.XAddArgs{Stream: m.Topic, Values: vals, Approx: true}
	if to.Shards > 0 {
		var i int
		if m.Key != "" {
			i = ShardOf(m.Key, to.Shards)
		} else {
			i = int(t.rr.Add(1) % uint32(to.Shards))
		}
		a.Stream = StreamKey(m.Topic, to.Shards, i)
	}
	switch {
	case to.Retention > 0:
		a.MinID = strconv.FormatInt(time.Now().Add(-to.Retention).UnixMilli(), 10)
	case to.MaxLen > 0:
		a.MaxLen = to.MaxLen
	}
	return a, nil
}

// Publish appends m to its topic's stream (XADD … MAXLEN ~ n * fields) and
// returns when Redis has replied. An error reply means nothing was written;
// a lost connection, a timeout or ctx ending after the command was sent
// returns an error wrapping [transport.ErrUnknownOutcome].
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	a, err := t.xaddArgs(m)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstream: publish %q: %w", m.Topic, err)
	}
	return publishErr(m.Topic, t.c.XAdd(ctx, a).Err())
}

// publishErr classifies an XADD error: a Redis error reply or a failed
// dial is a plain failure; anything else may have left.
func publishErr(topic string, err error) error {
	if err == nil {
		return nil
	}
	var rerr goredis.Error
	var op *net.OpError
	if errors.As(err, &rerr) || (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redisstream: publish %q: %w", topic, err)
	}
	return fmt.Errorf("redisstream: publish %q: %w: %w", topic, transport.ErrUnknownOutcome, err)
}

// PublishBatch publishes msgs in one pipeline (one round trip). It returns
// nil when every XADD was confirmed, else a *[transport.BatchError] with
// one entry per message.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	errs := make([]error, len(msgs))
	cmds := make([]*goredis.StringCmd, len(msgs))
	pipe := t.c.Pipeline()
	queued := 0
	for i, m := range msgs {
		a, err := t.xaddArgs(m)
		if err != nil {
			errs[i] = err
			continue
		}
		cmds[i] = pipe.XAdd(ctx, a)
		queued++
	}
	if queued > 0 {
		if err := ctx.Err(); err != nil {
			for i := range cmds {
				if cmds[i] != nil {
					errs[i] = fmt.Errorf("redisstream: publish %q: %w", msgs[i].Topic, err)
				}
			}
		} else {
			_, _ = pipe.Exec(ctx)
			for i, c := range cmds {
				if c != nil {
					errs[i] = publishErr(msgs[i].Topic, c.Err())
				}
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return &transport.BatchError{Errs: errs}
		}
	}
	return nil
}

// Subscribe opens sub: it creates the group on every stream of the topic
// (XGROUP CREATE … MKSTREAM, from "$", or "0" with StartAtOldest; an
// existing group is kept as it is) and, in exclusive mode, joins the
// group's members and waits briefly for its share of the shards. ctx
// bounds the opening only.
//
// sub.Group defaults to "ferry"; sub.Consumer to a name unique to this
// stream. sub.Options takes the keys of [ConsumeOptions].
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	if sub.Topic == "" {
		return nil, invalid("subscribe: empty topic")
	}
	if err := transport.UnknownKeys("redis", sub.Options, consumeKeys...); err != nil {
		return nil, err
	}
	cfg := t.opts.Consume
	if err := cfg.apply(sub.Options); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if sub.MaxInFlight > 0 && cfg.Count > sub.MaxInFlight {
		cfg.Count = sub.MaxInFlight
	}
	s := newStream(t, sub, cfg)
	start := "$"
	if sub.StartAtOldest {
		start = "0"
	}
	for _, sh := range s.shards {
		if err := t.c.XGroupCreateMkStream(ctx, sh.key, s.group, start).Err(); err != nil && !isBusyGroup(err) {
			return nil, fmt.Errorf("redisstream: subscribe %q: create group %q on %q: %w", sub.Topic, s.group, sh.key, err)
		}
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil, transport.ErrClosed
	}
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	s.start(ctx)
	return s, nil
}

func isBusyGroup(err error) bool { return goredis.HasErrorPrefix(err, "BUSYGROUP") }
func isNoGroup(err error) bool   { return goredis.HasErrorPrefix(err, "NOGROUP") }

func (t *Transport) forget(s *stream) {
	t.mu.Lock()
	delete(t.streams, s)
	t.mu.Unlock()
}

// Close closes every stream opened on t (releasing their unsettled
// deliveries and flushing their acks), then the connection pool. ctx
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
	if err := t.c.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Lag reports, per stream of sub's topic, how far sub's group is behind:
// Messages is the entries not yet delivered to the group (XINFO GROUPS
// lag, Redis 7) plus those delivered and not yet acked (pending);
// OldestAge is the age of the oldest of them, from its entry ID. A stream
// whose lag Redis cannot compute (after XDEL or trimming) counts pending
// plus the entries after the group's last-delivered ID.
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	var out []transport.Lag
	now := time.Now()
	for _, key := range t.streamsOf(sub.Topic) {
		groups, err := t.c.XInfoGroups(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstream: lag of %q on %q: %w", group, key, err)
		}
		var g *goredis.XInfoGroup
		for i := range groups {
			if groups[i].Name == group {
				g = &groups[i]
			}
		}
		if g == nil {
			return nil, fmt.Errorf("redisstream: lag: no group %q on stream %q", group, key)
		}
		l := transport.Lag{Partition: key}
		lag := g.Lag
		if lag < 0 {
			n, err := t.c.XLen(ctx, key).Result()
			if err != nil {
				return nil, fmt.Errorf("redisstream: lag of %q on %q: %w", group, key, err)
			}
			// Upper bound: entries after last-delivered cannot exceed the length.
			after, err := t.c.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", n).Result()
			if err != nil {
				return nil, fmt.Errorf("redisstream: lag of %q on %q: %w", group, key, err)
			}
			lag = int64(len(after))
		}
		l.Messages = lag + g.Pending
		var oldest string
		if g.Pending > 0 {
			p, err := t.c.XPending(ctx, key, group).Result()
			if err != nil {
				return nil, fmt.Errorf("redisstream: lag of %q on %q: %w", group, key, err)
			}
			oldest = p.Lower
		} else if lag > 0 {
			next, err := t.c.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", 1).Result()
			if err != nil {
				return nil, fmt.Errorf("redisstream: lag of %q on %q: %w", group, key, err)
			}
			if len(next) > 0 {
				oldest = next[0].ID
			}
		}
		if oldest != "" {
			if ts := idTime(oldest); !ts.IsZero() && now.After(ts) {
				l.OldestAge = now.Sub(ts)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// ListDLQ returns up to limit entries of the dead-letter topic dlq (all its
// shards, merged by entry ID), oldest first, without removing them.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if limit <= 0 {
		limit = 100
	}
	var all []goredis.XMessage
	for _, key := range t.streamsOf(dlq) {
		ms, err := t.c.XRangeN(ctx, key, "-", "+", int64(limit)).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstream: list dlq %q: %w", key, err)
		}
		all = append(all, ms...)
	}
	sortXMessages(all)
	if len(all) > limit {
		all = all[:limit]
	}
	out := make([]*handler.Message, len(all))
	for i, x := range all {
		out[i] = t.toMessage(dlq, x)
	}
	return out, nil
}

func (t *Transport) toMessage(topic string, x goredis.XMessage) *handler.Message {
	m := &handler.Message{Topic: topic}
	decode(m, x.Values)
	m.SetFacts(handler.Facts{Transport: Scheme, Partition: -1, Offset: -1, BrokerID: x.ID, PublishedAt: idTime(x.ID)})
	return m
}

// ReplayDLQ republishes the entries of dlq that r selects, oldest first per
// shard, each to r.Destination (its original topic by default) without the
// dead-letter headers, and deletes each from dlq (XDEL) once its publish is
// confirmed. An entry with no destination is left in place and reported.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	n := 0
	for _, key := range t.streamsOf(dlq) {
		start := "-"
		for {
			page, err := t.c.XRangeN(ctx, key, start, "+", 100).Result()
			if err != nil {
				return n, fmt.Errorf("redisstream: replay dlq %q: %w", key, err)
			}
			if len(page) == 0 {
				break
			}
			for _, x := range page {
				m := t.toMessage(dlq, x)
				if !r.Selects(m) {
					continue
				}
				dest := r.Destination(m)
				if dest == "" {
					return n, fmt.Errorf("redisstream: replay dlq %q: entry %s has no %s header and Replay.To is empty", key, x.ID, transport.HeaderOriginalTopic)
				}
				if err := t.Publish(ctx, transport.StripDeadLetterHeaders(m, dest)); err != nil {
					return n, fmt.Errorf("redisstream: replay dlq %q entry %s: %w", key, x.ID, err)
				}
				if err := t.c.XDel(ctx, key, x.ID).Err(); err != nil {
					return n, fmt.Errorf("redisstream: replay dlq %q: delete %s after republishing it: %w", key, x.ID, err)
				}
				n++
				if r.Limit > 0 && n >= r.Limit {
					return n, nil
				}
			}
			start = "(" + page[len(page)-1].ID
		}
	}
	return n, nil
}

func sortXMessages(ms []goredis.XMessage) {
	// Insertion sort: DLQ pages are small.
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && compareIDs(ms[j-1].ID, ms[j].ID) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
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
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)
