package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/parkwatch"
	"github.com/ferrymq/ferry/internal/storelog"
	"github.com/ferrymq/ferry/parking"
)

// Lot is a [parking.Lot] on Redis. Make one with [NewLot].
type Lot struct {
	c   goredis.UniversalClient
	cfg lotConfig
	w   *parkwatch.Watch
}

var _ parking.Lot = (*Lot)(nil)

// NewLot returns a Lot that keeps its records in Redis through c. It does
// no I/O. c may be a single node, a failover or a cluster client: every
// script touches the keys of one subscription, which share a hash tag. It
// returns an error wrapping [ErrInvalidOption] for a nil client or an
// invalid option.
func NewLot(c goredis.UniversalClient, opts ...LotOption) (*Lot, error) {
	cfg := newLotConfig(opts)
	if c == nil {
		return nil, fmt.Errorf("%w: redisstore: NewLot needs a client", ErrInvalidOption)
	}
	if err := storelog.Check("redisstore", cfg.log); err != nil {
		return nil, err
	}
	l := &Lot{c: c, cfg: cfg}
	l.w = newWatch(l)
	return l, nil
}

// base is the prefix of sub's keys, with its hash tag.
func (l *Lot) base(sub string) string { return l.cfg.prefix + "{" + sub + "}:" }

func (l *Lot) keysOf(sub, key string) (ver, parked, k, m, i string) {
	b := l.base(sub)
	return b + "ver", b + "parked", b + "k:" + key, b + "m:" + key, b + "i:" + key
}

func (l *Lot) subsKey() string { return l.cfg.prefix + "subscriptions" }

func wrap(op, sub, key string, err error) error {
	return fmt.Errorf("redisstore: %s %s/%s: %w", op, sub, key, err)
}

// Park parks m's key on sub; see [parking.Lot.Park].
func (l *Lot) Park(ctx context.Context, sub string, m *handler.Message, f parking.Failure) (parking.Status, error) {
	if m.Key == "" {
		return 0, fmt.Errorf("redisstore: park %s: message %s has no key", sub, m.ID)
	}
	defer l.changed(sub) // whatever the outcome: answer from the store until re-read
	msg, err := parking.MarshalMessage(m)
	if err != nil {
		return 0, err
	}
	ver, parked, k, mk, i := l.keysOf(sub, m.Key)
	n, err := parkScript.Run(ctx, l.c, []string{ver, parked, k, mk, i},
		m.Key, m.ID, msg, f.Error, f.Class, f.Attempts, unixMilli(f.At), l.channel(), sub).Int()
	if err != nil {
		return 0, wrap("park", sub, m.Key, err)
	}
	if parking.Status(n) == parking.Parked {
		storelog.Parked(l.cfg.log, sub, m, f)
		// Outside the script: the registry is not in the subscription's slot.
		if err := l.c.SAdd(ctx, l.subsKey(), sub).Err(); err != nil {
			return parking.Parked, wrap("park", sub, m.Key, err)
		}
	}
	return parking.Status(n), nil
}

// Append appends m if its key is parked on sub; see [parking.Lot.Append].
func (l *Lot) Append(ctx context.Context, sub string, m *handler.Message) (parking.Status, error) {
	msg, err := parking.MarshalMessage(m)
	if err != nil {
		return 0, err
	}
	_, _, k, mk, i := l.keysOf(sub, m.Key)
	n, err := appendScript.Run(ctx, l.c, []string{k, mk, i}, m.ID, msg).Int()
	if err != nil {
		return 0, wrap("append", sub, m.Key, err)
	}
	return parking.Status(n), nil
}

// Snapshot returns sub's version and parked keys; see
// [parking.Lot.Snapshot]. Unchanged, it is one script call reading one key.
func (l *Lot) Snapshot(ctx context.Context, sub string, known int64) (int64, []string, bool, error) {
	b := l.base(sub)
	res, err := snapshotScript.Run(ctx, l.c, []string{b + "ver", b + "parked"}, strconv.FormatInt(known, 10)).Slice()
	if err != nil {
		return 0, nil, false, wrap("snapshot", sub, "", err)
	}
	v, _ := res[0].(int64)
	if v == known {
		return v, nil, false, nil
	}
	keys := make([]string, 0, len(res)-1)
	for _, r := range res[1:] {
		s, _ := r.(string)
		keys = append(keys, s)
	}
	return v, keys, true, nil
}

// Stats returns sub's parked key count and oldest park time.
func (l *Lot) Stats(ctx context.Context, sub string) (parking.Stats, error) {
	b := l.base(sub)
	pipe := l.c.Pipeline()
	card := pipe.ZCard(ctx, b+"parked")
	oldest := pipe.ZRangeWithScores(ctx, b+"parked", 0, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		return parking.Stats{}, wrap("stats", sub, "", err)
	}
	st := parking.Stats{Keys: int(card.Val())}
	if zs := oldest.Val(); len(zs) > 0 {
		st.Oldest = time.UnixMilli(int64(zs[0].Score))
	}
	return st, nil
}

func ms(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// unixMilli is t in Unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// info decodes a key's state hash.
func info(sub, key string, h map[string]string, now time.Time) parking.KeyInfo {
	ki := parking.KeyInfo{
		Subscription: sub, Key: key, FirstID: h["first_id"],
		Failure:        parking.Failure{Error: h["error"], Class: h["class"], Attempts: atoi(h["attempts"]), At: ms(h["failed_at"])},
		FailedReleases: atoi(h["failed_releases"]),
		Count:          atoi(h["count"]),
		ParkedAt:       ms(h["parked_at"]),
	}
	if h["last_error"] != "" || h["last_class"] != "" {
		ki.LastFailure = parking.Failure{Error: h["last_error"], Class: h["last_class"],
			Attempts: atoi(h["last_attempts"]), At: ms(h["last_failed_at"])}
	}
	if at := ms(h["req_at"]); !at.IsZero() {
		ki.Request = parking.ReleaseRequest{By: h["req_by"], At: at}
	}
	if until := ms(h["lock_until"]); h["lock"] != "" && until.After(now) {
		ki.Releasing, ki.LockedUntil = true, until
	}
	return ki
}

// serverNow is the Redis server's clock, for comparing lock leases; this
// process's clock if the server's cannot be read.
func (l *Lot) serverNow(ctx context.Context) time.Time {
	t, err := l.c.Time(ctx).Result()
	if err != nil {
		l.cfg.log.Warn("redisstore: reading the server's clock failed; comparing release locks with this process's clock", "err", err)
		return time.Now()
	}
	return t
}

// Keys lists sub's parked keys, oldest first.
func (l *Lot) Keys(ctx context.Context, sub string) ([]parking.KeyInfo, error) {
	b := l.base(sub)
	keys, err := l.c.ZRange(ctx, b+"parked", 0, -1).Result()
	if err != nil {
		return nil, wrap("keys", sub, "", err)
	}
	now := l.serverNow(ctx)
	pipe := l.c.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(keys))
	for j, k := range keys {
		cmds[j] = pipe.HGetAll(ctx, b+"k:"+k)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, wrap("keys", sub, "", err)
		}
	}
	out := make([]parking.KeyInfo, 0, len(keys))
	for j, k := range keys {
		if h := cmds[j].Val(); len(h) > 0 { // released since ZRANGE otherwise
			out = append(out, info(sub, k, h, now))
		}
	}
	return out, nil
}

// Key returns one key's parked state.
func (l *Lot) Key(ctx context.Context, sub, key string) (parking.KeyInfo, error) {
	_, _, k, _, _ := l.keysOf(sub, key)
	h, err := l.c.HGetAll(ctx, k).Result()
	if err != nil {
		return parking.KeyInfo{}, wrap("key", sub, key, err)
	}
	if len(h) == 0 {
		return parking.KeyInfo{}, parking.ErrNotParked
	}
	return info(sub, key, h, l.serverNow(ctx)), nil
}

// decodeMember parses a messages zset member "<seq>:<ms>:<json>".
func decodeMember(s string) (parking.Entry, error) {
	a, rest, ok1 := strings.Cut(s, ":")
	b, js, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return parking.Entry{}, fmt.Errorf("redisstore: malformed entry %.40q", s)
	}
	seq, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return parking.Entry{}, fmt.Errorf("redisstore: malformed entry %.40q", s)
	}
	m, err := parking.UnmarshalMessage([]byte(js))
	if err != nil {
		return parking.Entry{}, err
	}
	return parking.Entry{Seq: seq, Message: m, ParkedAt: ms(b)}, nil
}

// Messages returns parked messages of key after seq after.
func (l *Lot) Messages(ctx context.Context, sub, key string, after int64, limit int) ([]parking.Entry, error) {
	_, _, _, mk, _ := l.keysOf(sub, key)
	rng := &goredis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf"}
	if limit > 0 {
		rng.Count = int64(limit)
	}
	members, err := l.c.ZRangeByScore(ctx, mk, rng).Result()
	if err != nil {
		return nil, wrap("messages", sub, key, err)
	}
	out := make([]parking.Entry, 0, len(members))
	for _, s := range members {
		e, err := decodeMember(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Subscriptions returns the subscriptions that ever had a parked key.
func (l *Lot) Subscriptions(ctx context.Context) ([]string, error) {
	subs, err := l.c.SMembers(ctx, l.subsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: subscriptions: %w", err)
	}
	sort.Strings(subs)
	return subs, nil
}

// Lock takes key's release lock; see [parking.Lot.Lock].
func (l *Lot) Lock(ctx context.Context, sub, key string, lease time.Duration) (string, error) {
	_, _, k, _, _ := l.keysOf(sub, key)
	tok := rand.Text()
	n, err := lockScript.Run(ctx, l.c, []string{k}, tok, max(lease.Milliseconds(), 1)).Int()
	switch {
	case err != nil:
		return "", wrap("lock", sub, key, err)
	case n == 0:
		return "", parking.ErrNotParked
	case n < 0:
		return "", parking.ErrReleasing
	}
	return tok, nil
}

// Remove deletes a replayed message; see [parking.Lot.Remove].
func (l *Lot) Remove(ctx context.Context, sub, key, token string, seq int64) error {
	_, _, k, mk, i := l.keysOf(sub, key)
	n, err := removeScript.Run(ctx, l.c, []string{k, mk, i}, token, seq).Int()
	if err != nil {
		return wrap("remove", sub, key, err)
	}
	if n < 0 {
		return parking.ErrLockLost
	}
	return nil
}

// Unpark unparks key if nothing is left; see [parking.Lot.Unpark].
func (l *Lot) Unpark(ctx context.Context, sub, key, token string) (bool, error) {
	defer l.changed(sub)
	ver, parked, k, mk, i := l.keysOf(sub, key)
	n, err := unparkScript.Run(ctx, l.c, []string{ver, parked, k, mk, i, l.base(sub) + "req"}, key, token, l.channel(), sub).Int()
	if err != nil {
		return false, wrap("unpark", sub, key, err)
	}
	if n < 0 {
		return false, parking.ErrLockLost
	}
	if n == 1 {
		storelog.Unparked(l.cfg.log, sub, key)
	}
	return n == 1, nil
}

// Unlock gives up key's release lock; see [parking.Lot.Unlock].
func (l *Lot) Unlock(ctx context.Context, sub, key, token string, failed *parking.Failure) error {
	_, _, k, _, _ := l.keysOf(sub, key)
	args := []any{token, "0", "", "", 0, 0, key}
	if failed != nil {
		args = []any{token, "1", failed.Error, failed.Class, failed.Attempts, unixMilli(failed.At), key}
	}
	n, err := unlockScript.Run(ctx, l.c, []string{k, l.base(sub) + "req"}, args...).Int()
	if err != nil {
		return wrap("unlock", sub, key, err)
	}
	if n < 0 {
		return parking.ErrLockLost
	}
	return nil
}

// auditRecord is the JSON a drop keeps: the key's state hash and the IDs.
type auditRecord struct {
	State map[string]any  `json:"state"`
	IDs   json.RawMessage `json:"ids"`
}

func decodeAudit(sub, rec string) (parking.Dropped, error) {
	var a auditRecord
	if err := json.Unmarshal([]byte(rec), &a); err != nil {
		return parking.Dropped{}, fmt.Errorf("redisstore: malformed audit record: %w", err)
	}
	h := make(map[string]string, len(a.State))
	for k, v := range a.State {
		switch v := v.(type) {
		case string:
			h[k] = v
		case float64:
			h[k] = strconv.FormatInt(int64(v), 10)
		}
	}
	d := parking.Dropped{KeyInfo: info(sub, h["key"], h, time.Now()),
		Audit: parking.Audit{By: h["by"], Reason: h["reason"]}, DroppedAt: ms(h["dropped_at"])}
	d.Count = atoi(h["count"])
	if s := strings.TrimSpace(string(a.IDs)); s != "{}" && s != "" { // cjson encodes an empty array as {}
		if err := json.Unmarshal(a.IDs, &d.IDs); err != nil {
			return parking.Dropped{}, fmt.Errorf("redisstore: malformed audit record: %w", err)
		}
	}
	return d, nil
}

// Drop discards key with an audit record; see [parking.Lot.Drop].
func (l *Lot) Drop(ctx context.Context, sub, key string, a parking.Audit) (parking.Dropped, error) {
	defer l.changed(sub)
	ver, parked, k, mk, i := l.keysOf(sub, key)
	res, err := dropScript.Run(ctx, l.c, []string{ver, parked, k, mk, i, l.base(sub) + "audit", l.base(sub) + "req"}, key, a.By, a.Reason, l.channel(), sub).Slice()
	if err != nil {
		return parking.Dropped{}, wrap("drop", sub, key, err)
	}
	switch n, _ := res[0].(int64); n {
	case 0:
		return parking.Dropped{}, wrap("drop", sub, key, parking.ErrNotParked)
	case -1:
		return parking.Dropped{}, wrap("drop", sub, key, parking.ErrReleasing)
	}
	rec, _ := res[1].(string)
	d, err := decodeAudit(sub, rec)
	if err == nil {
		storelog.Dropped(l.cfg.log, d)
	}
	return d, err
}

// Audits returns sub's drop records, oldest first.
func (l *Lot) Audits(ctx context.Context, sub string) ([]parking.Dropped, error) {
	recs, err := l.c.LRange(ctx, l.base(sub)+"audit", 0, -1).Result()
	if err != nil {
		return nil, wrap("audits", sub, "", err)
	}
	out := make([]parking.Dropped, 0, len(recs))
	for _, r := range recs {
		d, err := decodeAudit(sub, r)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// RequestRelease records a release request; see [parking.Lot.RequestRelease].
func (l *Lot) RequestRelease(ctx context.Context, sub, key, by string) error {
	_, _, k, _, _ := l.keysOf(sub, key)
	n, err := requestScript.Run(ctx, l.c, []string{k, l.base(sub) + "req", l.base(sub) + "reqseq"}, key, by).Int()
	if err != nil {
		return wrap("request release", sub, key, err)
	}
	if n == 0 {
		return parking.ErrNotParked
	}
	return nil
}

// Requests returns sub's keys with a pending release request, oldest
// request first: one ZRANGE.
func (l *Lot) Requests(ctx context.Context, sub string) ([]string, error) {
	keys, err := l.c.ZRange(ctx, l.base(sub)+"req", 0, -1).Result()
	if err != nil {
		return nil, wrap("requests", sub, "", err)
	}
	return keys, nil
}
