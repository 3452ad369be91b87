package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
	"github.com/ferrymq/ferry/transport/redisstream"
)

// ErrGroupActive is wrapped by [ResetOffsets] when the group has live
// members: stop every consumer of the group first.
var ErrGroupActive = errors.New("the group has live members; stop its consumers first")

// OffsetReset says where to move a group's position on a topic.
type OffsetReset struct {
	Topic, Group string
	Partitions   []int32 // Kafka: the partitions to move; empty: all
	// Exactly one of these: "earliest", "latest", a time, an offset (a
	// Kafka offset applied to every partition given, or a Redis stream
	// entry ID), or another group whose position to copy.
	To        string
	Time      time.Time
	Offset    string
	FromGroup string
	DryRun    bool
	// LiveIdle is how recently a Redis Streams consumer must have been seen
	// to count as a live member; 0 means RedisLiveIdle.
	LiveIdle time.Duration
}

// OffsetChange is one partition's (stream's) move; From and To are
// offsets on Kafka ("-1": never committed) and entry IDs on Redis.
type OffsetChange struct {
	Partition string `json:"partition"`
	From      string `json:"from"`
	To        string `json:"to"`
}

// RedisLiveIdle is how recently a Redis Streams consumer must have been
// seen for [ResetOffsets] to count it as a live member of its group.
const RedisLiveIdle = 30 * time.Second

func (r OffsetReset) check() error {
	n := 0
	for _, set := range []bool{r.To != "", !r.Time.IsZero(), r.Offset != "", r.FromGroup != ""} {
		if set {
			n++
		}
	}
	switch {
	case r.Topic == "" || r.Group == "":
		return fmt.Errorf("%w: give --topic and --group", ErrUsage)
	case n != 1:
		return fmt.Errorf("%w: give exactly one of --to-earliest, --to-latest, --to-time, --to-offset, --to-group", ErrUsage)
	case r.To != "" && r.To != "earliest" && r.To != "latest":
		return fmt.Errorf("%w: --to %q: want earliest or latest", ErrUsage, r.To)
	}
	return nil
}

// ResetOffsets moves r.Group's position on r.Topic, or with r.DryRun
// computes the move only. Kafka: to the earliest or latest retained
// offset, the first message at or after a time, an offset, or another
// group's committed offsets, refused while the group has members. Redis
// Streams: XGROUP SETID to 0, $, the entry before a time, an entry ID or
// another group's last-delivered ID, refused while a consumer of the group
// was seen within r.LiveIdle. Other transports: an error wrapping
// [ErrNoOffsets].
func ResetOffsets(ctx context.Context, t transport.Transport, r OffsetReset) ([]OffsetChange, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	switch t := t.(type) {
	case *kafka.Transport:
		return resetKafka(ctx, t, r)
	case *redisstream.Transport:
		return resetRedis(ctx, t, r)
	}
	return nil, fmt.Errorf("%w: %s delivers from queues, not from a position a group could move; replay from the DLQ instead",
		ErrNoOffsets, SchemeOf(t))
}

func kafkaErr(err error) error {
	if errors.Is(err, kafka.ErrGroupActive) {
		return fmt.Errorf("%w (%w)", ErrGroupActive, err)
	}
	return err
}

func resetKafka(ctx context.Context, t *kafka.Transport, r OffsetReset) ([]OffsetChange, error) {
	base := kafka.Reset{Group: r.Group, Topic: r.Topic, Partitions: r.Partitions, DryRun: r.DryRun}
	conv := func(cs []kafka.OffsetChange) []OffsetChange {
		out := make([]OffsetChange, len(cs))
		for i, c := range cs {
			out[i] = OffsetChange{Partition: strconv.Itoa(int(c.Partition)), From: strconv.FormatInt(c.From, 10), To: strconv.FormatInt(c.To, 10)}
		}
		return out
	}
	switch {
	case r.To == "earliest":
		base.To = kafka.ResetEarliest
	case r.To == "latest":
		base.To = kafka.ResetLatest
	case !r.Time.IsZero():
		base.To, base.Time = kafka.ResetTime, r.Time
	default:
		// An absolute offset or another group's: the current positions
		// first (a dry run), then one shift per partition.
		target := map[int32]int64{}
		if r.FromGroup != "" {
			other, err := t.ResetOffsets(ctx, kafka.Reset{Group: r.FromGroup, Topic: r.Topic, Partitions: r.Partitions, To: kafka.ResetLatest, DryRun: true})
			if err != nil {
				return nil, fmt.Errorf("group %q on %s: %w", r.FromGroup, r.Topic, err)
			}
			for _, c := range other {
				if c.From < 0 {
					return nil, fmt.Errorf("%w: group %q has no committed offset on %s/%d", ErrUsage, r.FromGroup, r.Topic, c.Partition)
				}
				target[c.Partition] = c.From
			}
		} else {
			off, err := strconv.ParseInt(r.Offset, 10, 64)
			if err != nil || off < 0 {
				return nil, fmt.Errorf("%w: --to-offset %q: want a Kafka offset (0 or more)", ErrUsage, r.Offset)
			}
			cur, err := t.ResetOffsets(ctx, kafka.Reset{Group: r.Group, Topic: r.Topic, Partitions: r.Partitions, To: kafka.ResetEarliest, DryRun: true})
			if err != nil {
				return nil, kafkaErr(err)
			}
			for _, c := range cur {
				target[c.Partition] = off
			}
		}
		cur, err := t.ResetOffsets(ctx, kafka.Reset{Group: r.Group, Topic: r.Topic, Partitions: r.Partitions, To: kafka.ResetEarliest, DryRun: true})
		if err != nil {
			return nil, kafkaErr(err)
		}
		var out []OffsetChange
		for _, c := range cur {
			want, ok := target[c.Partition]
			if !ok {
				continue
			}
			from := c.From
			if from < 0 {
				from = c.To // a partition never committed shifts from the oldest
			}
			rr := base
			rr.Partitions, rr.To, rr.Shift = []int32{c.Partition}, kafka.ResetShift, want-from
			cs, err := t.ResetOffsets(ctx, rr)
			if err != nil {
				return out, kafkaErr(err)
			}
			out = append(out, conv(cs)...)
		}
		return out, nil
	}
	cs, err := t.ResetOffsets(ctx, base)
	if err != nil {
		return nil, kafkaErr(err)
	}
	return conv(cs), nil
}

func resetRedis(ctx context.Context, t *redisstream.Transport, r OffsetReset) ([]OffsetChange, error) {
	if len(r.Partitions) > 0 {
		return nil, fmt.Errorf("%w: --partition is for Kafka; a Redis topic's shards move together", ErrUsage)
	}
	// Lag names the topic's streams, and fails for a missing group.
	ls, err := t.Lag(ctx, transport.Subscription{Topic: r.Topic, Group: r.Group})
	if err != nil {
		return nil, fmt.Errorf("group %q on %s: %w", r.Group, r.Topic, err)
	}
	c := t.Client()
	var out []OffsetChange
	for _, l := range ls {
		key := l.Partition
		from, err := lastDelivered(ctx, c, key, r.Group)
		if err != nil {
			return nil, err
		}
		live := r.LiveIdle
		if live <= 0 {
			live = RedisLiveIdle
		}
		if !r.DryRun {
			cons, err := c.XInfoConsumers(ctx, key, r.Group).Result()
			if err != nil {
				return nil, fmt.Errorf("consumers of %q on %s: %w", r.Group, key, err)
			}
			for _, cn := range cons {
				if cn.Idle < live || (cn.Inactive >= 0 && cn.Inactive < live) {
					return nil, fmt.Errorf("%w: consumer %q of %q on %s was seen %s ago", ErrGroupActive, cn.Name, r.Group, key, cn.Idle.Round(time.Second))
				}
			}
		}
		var to string
		switch {
		case r.To == "earliest":
			to = "0-0"
		case r.To == "latest":
			xs, err := c.XRevRangeN(ctx, key, "+", "-", 1).Result()
			if err != nil {
				return nil, fmt.Errorf("stream %s: %w", key, err)
			}
			to = "0-0"
			if len(xs) > 0 {
				to = xs[0].ID
			}
		case !r.Time.IsZero():
			ms := r.Time.UnixMilli()
			if ms <= 0 {
				to = "0-0"
			} else {
				to = strconv.FormatInt(ms-1, 10) + "-18446744073709551615" // just before the first entry at or after Time
			}
		case r.Offset != "":
			to = r.Offset
		default:
			to, err = lastDelivered(ctx, c, key, r.FromGroup)
			if err != nil {
				return nil, err
			}
		}
		if !r.DryRun {
			if err := c.XGroupSetID(ctx, key, r.Group, to).Err(); err != nil {
				return out, fmt.Errorf("XGROUP SETID %s %s %s: %w", key, r.Group, to, err)
			}
		}
		out = append(out, OffsetChange{Partition: key, From: from, To: to})
	}
	return out, nil
}

func lastDelivered(ctx context.Context, c *goredis.Client, key, group string) (string, error) {
	gs, err := c.XInfoGroups(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("groups of %s: %w", key, err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g.LastDeliveredID, nil
		}
	}
	return "", fmt.Errorf("group %q on %s: %w", group, key, transport.ErrNotFound)
}
