package memstore

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/storelog"
	"github.com/ferrymq/ferry/parking"
)

// Lot is a [parking.Lot] in this process's memory. The zero value is not
// usable; make one with [NewLot].
type Lot struct {
	log *slog.Logger

	mu     sync.Mutex
	subs   map[string]*sub
	views  sync.Map     // subscription → *sub, for IsParked without l.mu
	parked atomic.Int64 // keys parked over all subscriptions: the fast path's guard
}

type sub struct {
	version int64
	keys    map[string]*key
	audits  []parking.Dropped
	// view is the set of parked keys read by IsParked without the lock.
	view atomic.Pointer[map[string]struct{}]
}

type key struct {
	info    parking.KeyInfo
	seq     int64
	entries []parking.Entry
	ids     map[string]struct{}
	token   string
	lease   time.Duration
}

var (
	_ parking.Lot     = (*Lot)(nil)
	_ parking.Checker = (*Lot)(nil)
)

// NewLot returns an empty Lot. It returns an error wrapping
// [ErrInvalidOption] for an invalid option.
func NewLot(opts ...LotOption) (*Lot, error) {
	c, err := newLotConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Lot{log: c.log, subs: map[string]*sub{}}, nil
}

func (l *Lot) sub(name string) *sub {
	s, ok := l.subs[name]
	if !ok {
		s = &sub{keys: map[string]*key{}}
		empty := map[string]struct{}{}
		s.view.Store(&empty)
		l.subs[name] = s
		l.views.Store(name, s)
	}
	return s
}

// changed bumps s's version and publishes a new view of its parked keys.
// Called with l.mu held.
func (s *sub) changed() {
	s.version++
	v := make(map[string]struct{}, len(s.keys))
	for k := range s.keys {
		v[k] = struct{}{}
	}
	s.view.Store(&v)
}

// IsParked reports whether key is parked on subscription sn, exactly: a
// Park, Unpark or Drop is visible to it once it returned. It takes no lock,
// and costs one atomic load when no key is parked anywhere.
func (l *Lot) IsParked(sn, key string) bool {
	if l.parked.Load() == 0 {
		return false
	}
	v, ok := l.views.Load(sn)
	if !ok {
		return false
	}
	_, ok = (*v.(*sub).view.Load())[key]
	return ok
}

func (k *key) add(m *handler.Message, now time.Time) parking.Status {
	if m.ID != "" {
		if _, dup := k.ids[m.ID]; dup {
			return parking.Duplicate
		}
		k.ids[m.ID] = struct{}{}
	}
	k.seq++
	k.entries = append(k.entries, parking.Entry{Seq: k.seq, Message: m.Clone(), ParkedAt: now})
	k.info.Count++
	return parking.Appended
}

// Park parks m's key on sn with m first; see [parking.Lot.Park].
func (l *Lot) Park(ctx context.Context, sn string, m *handler.Message, f parking.Failure) (parking.Status, error) {
	if m.Key == "" {
		return 0, fmt.Errorf("memstore: park %s: message %s has no key", sn, m.ID)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sub(sn)
	if k, ok := s.keys[m.Key]; ok {
		return k.add(m, now), nil
	}
	k := &key{ids: map[string]struct{}{}, info: parking.KeyInfo{
		Subscription: sn, Key: m.Key, FirstID: m.ID, Failure: f, ParkedAt: now,
	}}
	k.add(m, now)
	s.keys[m.Key] = k
	l.parked.Add(1)
	s.changed()
	storelog.Parked(l.log, sn, m, f)
	return parking.Parked, nil
}

// Append appends m if its key is parked on sn; see [parking.Lot.Append].
func (l *Lot) Append(ctx context.Context, sn string, m *handler.Message) (parking.Status, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.subs[sn]
	if !ok {
		return parking.NotParked, nil
	}
	k, ok := s.keys[m.Key]
	if !ok {
		return parking.NotParked, nil
	}
	return k.add(m, now), nil
}

// Snapshot returns sn's version and parked keys; see [parking.Lot.Snapshot].
func (l *Lot) Snapshot(ctx context.Context, sn string, known int64) (int64, []string, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.subs[sn]
	if !ok {
		return 0, nil, known != 0, nil
	}
	if s.version == known {
		return known, nil, false, nil
	}
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	return s.version, keys, true, nil
}

// Stats returns sn's parked key count and oldest park time.
func (l *Lot) Stats(ctx context.Context, sn string) (parking.Stats, error) {
	if err := ctx.Err(); err != nil {
		return parking.Stats{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var st parking.Stats
	if s, ok := l.subs[sn]; ok {
		for _, k := range s.keys {
			st.Keys++
			if st.Oldest.IsZero() || k.info.ParkedAt.Before(st.Oldest) {
				st.Oldest = k.info.ParkedAt
			}
		}
	}
	return st, nil
}

func (k *key) snapshot(now time.Time) parking.KeyInfo {
	info := k.info
	if k.token != "" && now.Before(info.LockedUntil) {
		info.Releasing = true
	} else {
		info.LockedUntil = time.Time{}
	}
	return info
}

// Keys lists sn's parked keys, oldest first.
func (l *Lot) Keys(ctx context.Context, sn string) ([]parking.KeyInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []parking.KeyInfo
	if s, ok := l.subs[sn]; ok {
		for _, k := range s.keys {
			out = append(out, k.snapshot(now))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ParkedAt.Equal(out[j].ParkedAt) {
			return out[i].ParkedAt.Before(out[j].ParkedAt)
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// Key returns one key's parked state.
func (l *Lot) Key(ctx context.Context, sn, key string) (parking.KeyInfo, error) {
	if err := ctx.Err(); err != nil {
		return parking.KeyInfo{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.key(sn, key)
	if err != nil {
		return parking.KeyInfo{}, err
	}
	return k.snapshot(time.Now()), nil
}

func (l *Lot) key(sn, name string) (*key, error) {
	if s, ok := l.subs[sn]; ok {
		if k, ok := s.keys[name]; ok {
			return k, nil
		}
	}
	return nil, parking.ErrNotParked
}

// Messages returns parked messages of key after seq after.
func (l *Lot) Messages(ctx context.Context, sn, key string, after int64, limit int) ([]parking.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.key(sn, key)
	if err != nil {
		return nil, nil
	}
	i := sort.Search(len(k.entries), func(i int) bool { return k.entries[i].Seq > after })
	var out []parking.Entry
	for ; i < len(k.entries) && (limit <= 0 || len(out) < limit); i++ {
		e := k.entries[i]
		e.Message = e.Message.Clone()
		out = append(out, e)
	}
	return out, nil
}

// Subscriptions returns the subscriptions that ever had a parked key.
func (l *Lot) Subscriptions(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.subs))
	for s := range l.subs {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// Lock takes key's release lock; see [parking.Lot.Lock].
func (l *Lot) Lock(ctx context.Context, sn, key string, lease time.Duration) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.key(sn, key)
	if err != nil {
		return "", err
	}
	if k.token != "" && now.Before(k.info.LockedUntil) {
		return "", parking.ErrReleasing
	}
	k.token, k.lease = rand.Text(), lease
	k.info.LockedUntil = now.Add(lease)
	return k.token, nil
}

// holder returns key if token holds its lock. Called with l.mu held.
func (l *Lot) holder(sn, name, token string) (*key, error) {
	k, err := l.key(sn, name)
	if err != nil || k.token != token || token == "" {
		return nil, parking.ErrLockLost
	}
	return k, nil
}

// Remove deletes a replayed message; see [parking.Lot.Remove].
func (l *Lot) Remove(ctx context.Context, sn, key, token string, seq int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.holder(sn, key, token)
	if err != nil {
		return err
	}
	i := sort.Search(len(k.entries), func(i int) bool { return k.entries[i].Seq >= seq })
	if i < len(k.entries) && k.entries[i].Seq == seq {
		delete(k.ids, k.entries[i].Message.ID)
		k.entries = append(k.entries[:i:i], k.entries[i+1:]...)
		k.info.Count--
	}
	k.info.LockedUntil = time.Now().Add(k.lease)
	return nil
}

// Unpark unparks key if nothing is left; see [parking.Lot.Unpark].
func (l *Lot) Unpark(ctx context.Context, sn, key, token string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.holder(sn, key, token)
	if err != nil {
		return false, err
	}
	if len(k.entries) > 0 {
		return false, nil
	}
	s := l.subs[sn]
	delete(s.keys, key)
	l.parked.Add(-1)
	s.changed()
	storelog.Unparked(l.log, sn, key)
	return true, nil
}

// Unlock gives up key's release lock; see [parking.Lot.Unlock].
func (l *Lot) Unlock(ctx context.Context, sn, key, token string, failed *parking.Failure) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.holder(sn, key, token)
	if err != nil {
		return err
	}
	k.token, k.info.LockedUntil = "", time.Time{}
	if failed != nil {
		k.info.LastFailure = *failed
		k.info.FailedReleases++
		k.info.Request = parking.ReleaseRequest{}
	}
	return nil
}

// RequestRelease records a release request; see [parking.Lot.RequestRelease].
func (l *Lot) RequestRelease(ctx context.Context, sn, key, by string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.key(sn, key)
	if err != nil {
		return err
	}
	if k.info.Request.At.IsZero() {
		k.info.Request = parking.ReleaseRequest{By: by, At: time.Now()}
	}
	return nil
}

// Requests returns sn's keys with a pending release request, oldest
// request first.
func (l *Lot) Requests(ctx context.Context, sn string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.subs[sn]
	if !ok {
		return nil, nil
	}
	var reqs []parking.KeyInfo
	for _, k := range s.keys {
		if !k.info.Request.At.IsZero() {
			reqs = append(reqs, k.info)
		}
	}
	sort.Slice(reqs, func(i, j int) bool {
		if !reqs[i].Request.At.Equal(reqs[j].Request.At) {
			return reqs[i].Request.At.Before(reqs[j].Request.At)
		}
		return reqs[i].Key < reqs[j].Key
	})
	out := make([]string, len(reqs))
	for i, k := range reqs {
		out[i] = k.Key
	}
	return out, nil
}

// Drop discards key with an audit record; see [parking.Lot.Drop].
func (l *Lot) Drop(ctx context.Context, sn, key string, a parking.Audit) (parking.Dropped, error) {
	if err := ctx.Err(); err != nil {
		return parking.Dropped{}, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := l.key(sn, key)
	if err != nil {
		return parking.Dropped{}, fmt.Errorf("memstore: drop %s/%s: %w", sn, key, err)
	}
	if k.token != "" && now.Before(k.info.LockedUntil) {
		return parking.Dropped{}, fmt.Errorf("memstore: drop %s/%s: %w", sn, key, parking.ErrReleasing)
	}
	d := parking.Dropped{KeyInfo: k.snapshot(now), Audit: a, DroppedAt: now}
	for _, e := range k.entries {
		d.IDs = append(d.IDs, e.Message.ID)
	}
	s := l.subs[sn]
	delete(s.keys, key)
	s.audits = append(s.audits, d)
	l.parked.Add(-1)
	s.changed()
	storelog.Dropped(l.log, d)
	return d, nil
}

// Audits returns sn's drop records, oldest first.
func (l *Lot) Audits(ctx context.Context, sn string) ([]parking.Dropped, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.subs[sn]
	if !ok {
		return nil, nil
	}
	return append([]parking.Dropped(nil), s.audits...), nil
}
