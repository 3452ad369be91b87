package memstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/lease"
)

// Store is an [idempotency.Store] in this process's memory, in lease mode.
// Make one with [NewStore].
type Store struct {
	l *lease.Store
	b *records
}

var _ idempotency.Store = (*Store)(nil)

// NewStore returns an empty Store. It returns an error wrapping
// [ErrInvalidOption] for an invalid option.
func NewStore(opts ...StoreOption) (*Store, error) {
	c := newStoreConfig(opts)
	if err := lease.Check("memstore", c.lease, c.ttl, c.log); err != nil {
		return nil, err
	}
	b := &records{recs: make(map[string]*record), log: c.log}
	return &Store{l: lease.New(b, "memstore", c.lease, c.ttl, c.log), b: b}, nil
}

// Claim implements [idempotency.Store]. It never blocks, and fails only
// when ctx has ended.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	return s.l.Claim(ctx, key)
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	return s.l.Complete(ctx, key, token, result)
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.l.Release(ctx, key, token)
}

// Len returns the number of records held, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return len(s.b.recs)
}

// records is the Store's [lease.Backend]: one map behind a mutex.
type records struct {
	mu    sync.Mutex
	recs  map[string]*record
	swept int // map size after the last sweep
	log   *slog.Logger
}

type record struct {
	done    bool
	token   string
	result  []byte
	expires time.Time // lease end (in progress) or record expiry (done)
}

// Take implements [lease.Backend].
func (b *records) Take(ctx context.Context, key, token string, d time.Duration) (lease.Record, error) {
	if err := ctx.Err(); err != nil {
		return lease.Record{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recs[key]
	if r != nil && now.Before(r.expires) {
		if r.done {
			return lease.Record{State: idempotency.Done, Result: append([]byte(nil), r.result...)}, nil
		}
		return lease.Record{State: idempotency.InProgress, Left: r.expires.Sub(now)}, nil
	}
	if r == nil {
		b.sweep(now)
		r = &record{}
		b.recs[key] = r
	}
	*r = record{token: token, expires: now.Add(d)}
	return lease.Record{State: idempotency.New}, nil
}

// sweep drops expired records once the map has doubled since the last
// sweep, so that memory stays proportional to the live records.
func (b *records) sweep(now time.Time) {
	if len(b.recs) < 2*b.swept+1024 {
		return
	}
	before := len(b.recs)
	for k, r := range b.recs {
		if !now.Before(r.expires) {
			delete(b.recs, k)
		}
	}
	b.swept = len(b.recs)
	b.log.Debug("memstore: dropped expired records", "dropped", before-b.swept, "live", b.swept)
}

// Finish implements [lease.Backend].
func (b *records) Finish(ctx context.Context, key, token string, result []byte, ttl time.Duration) (bool, error) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recs[key]
	switch {
	case r == nil || !now.Before(r.expires):
		r = &record{}
		b.recs[key] = r
	case r.done:
		return true, nil
	case r.token != token:
		return false, nil
	}
	*r = record{done: true, result: append([]byte(nil), result...), expires: now.Add(ttl)}
	return true, nil
}

// Free implements [lease.Backend].
func (b *records) Free(ctx context.Context, key, token string) (bool, error) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recs[key]
	if r != nil && now.Before(r.expires) && (r.done || r.token != token) {
		return false, nil
	}
	delete(b.recs, key)
	return true, nil
}
