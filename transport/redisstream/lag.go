package redisstream

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
)

// Lag reports, per stream of sub's topic, how far sub's group is behind:
// Messages is the entries not yet delivered to the group (XINFO GROUPS
// lag, Redis 7) plus those delivered and not yet acked (pending);
// OldestAge is the age of the oldest of them, from its entry ID. A stream
// whose lag Redis cannot compute (after XDEL or trimming) counts pending
// plus the entries after the group's last-delivered ID. A missing stream
// or group is an error wrapping [transport.ErrNotFound].
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	var out []transport.Lag
	now := time.Now()
	for _, key := range t.streamsOf(sub.Topic) {
		l, err := t.streamLag(ctx, key, group, now)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// streamLag is Lag of one stream.
func (t *Transport) streamLag(ctx context.Context, key, group string, now time.Time) (transport.Lag, error) {
	l := transport.Lag{Partition: key}
	wrap := func(err error) error {
		return fmt.Errorf("redisstream: lag of %q on %q on %s: %w", group, key, t.cfg.addr, err)
	}
	groups, err := t.c.XInfoGroups(ctx, key).Result()
	if goredis.HasErrorPrefix(err, "no such key") {
		return l, wrap(fmt.Errorf("no such stream: %w", transport.ErrNotFound))
	}
	if err != nil {
		return l, wrap(err)
	}
	var g *goredis.XInfoGroup
	for i := range groups {
		if groups[i].Name == group {
			g = &groups[i]
		}
	}
	if g == nil {
		return l, wrap(fmt.Errorf("no such group: %w", transport.ErrNotFound))
	}
	lag := g.Lag
	if lag < 0 {
		n, err := t.c.XLen(ctx, key).Result()
		if err != nil {
			return l, wrap(err)
		}
		// Upper bound: entries after last-delivered cannot exceed the length.
		after, err := t.c.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", n).Result()
		if err != nil {
			return l, wrap(err)
		}
		lag = int64(len(after))
	}
	l.Messages = lag + g.Pending
	var oldest string
	if g.Pending > 0 {
		p, err := t.c.XPending(ctx, key, group).Result()
		if err != nil {
			return l, wrap(err)
		}
		oldest = p.Lower
	} else if lag > 0 {
		next, err := t.c.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", 1).Result()
		if err != nil {
			return l, wrap(err)
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
	return l, nil
}

// Consumed returns how many entries of sub's topic sub's group has
// consumed so far: read and acked, summed over the topic's streams (XINFO
// GROUPS entries-read minus pending, Redis 7). It only grows while the
// group exists, so the rate of its change is the group's throughput; the
// ferry console draws its chart from it. A missing stream or group is an
// error wrapping [transport.ErrNotFound].
func (t *Transport) Consumed(ctx context.Context, sub transport.Subscription) (int64, error) {
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	var n int64
	for _, key := range t.streamsOf(sub.Topic) {
		groups, err := t.c.XInfoGroups(ctx, key).Result()
		if goredis.HasErrorPrefix(err, "no such key") {
			err = fmt.Errorf("no such stream: %w", transport.ErrNotFound)
		}
		if err != nil {
			return 0, fmt.Errorf("redisstream: consumed of %q on %q on %s: %w", group, key, t.cfg.addr, err)
		}
		found := false
		for _, g := range groups {
			if g.Name == group {
				n += max(g.EntriesRead-g.Pending, 0)
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("redisstream: consumed of %q on %q on %s: no such group: %w", group, key, t.cfg.addr, transport.ErrNotFound)
		}
	}
	return n, nil
}
