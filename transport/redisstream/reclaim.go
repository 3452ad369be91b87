package redisstream

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Reclaiming, on the fetch goroutine: entries pending longer than
// claim_idle (a dead member's, or Nacked ones whose delay is over) are
// taken over with XAUTOCLAIM every claim_interval; in exclusive mode only
// by the shard's owner, and a member that has just acquired a shard takes
// over every entry pending in it before reading new ones.

// claim takes over entries of sh pending longer than minIdle, continuing
// the shard's XAUTOCLAIM cursor, and queues them with their delivery
// counts.
func (s *stream) claim(ctx context.Context, sh *shard, minIdle time.Duration) error {
	if sh.cursor == "" {
		sh.cursor = "0-0"
	}
	next, err := s.claimPage(ctx, sh, sh.cursor, minIdle)
	if err != nil {
		return err
	}
	sh.cursor = next
	return nil
}

// claimPage runs one XAUTOCLAIM page and returns the next cursor. An entry
// past MaxDeliveries goes to the DLQ instead.
func (s *stream) claimPage(ctx context.Context, sh *shard, cursor string, minIdle time.Duration) (string, error) {
	res, err := claimScript.Run(ctx, s.rc, []string{sh.key}, s.group, s.consumer, minIdle.Milliseconds(), cursor, s.cfg.count).Slice()
	if err != nil {
		return cursor, fmt.Errorf("redisstream: claim on %q as %s/%s on %s: %w", sh.key, s.group, s.consumer, s.t.cfg.addr, err)
	}
	if len(res) != 4 {
		return cursor, fmt.Errorf("redisstream: claim on %q: unexpected reply of %d elements", sh.key, len(res))
	}
	next, _ := res[0].(string)
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	if deleted, _ := res[3].([]any); len(deleted) > 0 {
		ids := make([]string, 0, len(deleted))
		for _, d := range deleted {
			if id, ok := d.(string); ok {
				ids = append(ids, id)
			}
		}
		s.forgetNacked(sh, ids)
		s.dropped(sh, ids)
	}
	if next == "" {
		next = "0-0"
	}
	if len(entries) == 0 {
		return next, nil
	}
	now := time.Now()
	b := &readBatch{ds: make([]delivery, 0, len(entries))}
	claimed := make([]string, 0, len(entries))
	for i, e := range entries {
		x, ok := parseEntry(e)
		if !ok {
			continue
		}
		claimed = append(claimed, x.ID)
		attempt := 1
		if i < len(counts) {
			if n, ok := counts[i].(int64); ok {
				attempt = int(n)
			}
		}
		if s.cfg.maxDeliveries > 0 && attempt > s.cfg.maxDeliveries {
			if err := s.deadLetter(ctx, sh, x, attempt-1); err != nil {
				s.log.Warn("redisstream: dead-lettering failed; the entry stays pending", "stream", sh.key, "id", x.ID, "err", err)
			}
			continue
		}
		b.ds = b.ds[:len(b.ds)+1]
		s.setDelivery(&b.ds[len(b.ds)-1], b, sh, x, attempt, now)
	}
	s.forgetNacked(sh, claimed)
	if len(b.ds) > 0 {
		s.track(b)
	}
	return next, nil
}

// forgetNacked removes ids from the Nacked entries of sh: they were
// claimed again, or dropped.
func (s *stream) forgetNacked(sh *shard, ids []string) {
	s.mu.Lock()
	if len(sh.nacked) > 0 {
		for _, id := range ids {
			delete(sh.nacked, id)
		}
	}
	s.mu.Unlock()
}

// dropTrimmed acks entries of this consumer whose data is gone (trimmed
// or deleted before they were acked): they cannot be delivered.
func (s *stream) dropTrimmed(ctx context.Context, sh *shard, ids []string) {
	s.dropped(sh, ids)
	if err := s.c.XAck(ctx, sh.key, s.group, ids...).Err(); err != nil {
		s.log.Warn("redisstream: XACK of trimmed entries failed", "stream", sh.key, "group", s.group, "err", err)
	}
}

// parseEntry converts a script's [id, [field, value, …]] entry.
func parseEntry(e any) (goredis.XMessage, bool) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return goredis.XMessage{}, false
	}
	id, _ := pair[0].(string)
	fields, _ := pair[1].([]any)
	vals := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		vals[k] = fields[i+1]
	}
	return goredis.XMessage{ID: id, Values: vals}, id != ""
}

// takeovers, in exclusive mode, claims every pending entry of the shards
// this member has just acquired, whoever held them, before any new entry
// of those shards is read: the previous owner's unfinished entries come
// first, in ID order.
func (s *stream) takeovers(ctx context.Context) error {
	flushed := false
	for _, sh := range s.shards {
		if !sh.takeover.Load() || !sh.held.Load() {
			continue
		}
		if sh.active.Load() > 0 || sh.parked.Load() > 0 {
			continue // still finishing our own earlier work on it
		}
		if !flushed {
			if err := s.acks.flush(ctx); err != nil {
				return err
			}
			flushed = true
		}
		cursor := "0-0"
		for {
			next, err := s.claimPage(ctx, sh, cursor, 0)
			if err != nil {
				return err
			}
			if next == "0-0" {
				break
			}
			cursor = next
		}
		sh.cursor = "0-0"
		sh.takeover.Store(false)
	}
	return nil
}

// recreateGroups creates the group again on every stream after NOGROUP:
// the stream or group was deleted, or Redis restarted without its data.
// Everything in a recreated stream is new to the group, so it starts at 0.
func (s *stream) recreateGroups(ctx context.Context) {
	for _, sh := range s.shards {
		err := s.c.XGroupCreateMkStream(ctx, sh.key, s.group, "0").Err()
		if err != nil && !isBusyGroup(err) {
			s.log.Warn("redisstream: recreating consumer group failed", "stream", sh.key, "group", s.group, "err", err)
		}
	}
}
