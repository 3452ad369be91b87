package memory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ferrymq/ferry/idempotency"
)

// ErrInvalidOption is wrapped by the error [New] returns for an invalid
// option.
var ErrInvalidOption = errors.New("idempotency/memory: invalid option")

// An Option configures [New].
type Option func(*config)

type config struct {
	lease, ttl time.Duration
	now        func() time.Time
	err        error
}

// Lease sets how long a claim is held before another caller may take it
// over, overriding [idempotency.DefaultLease]. d must be positive.
func Lease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 && c.err == nil {
			c.err = fmt.Errorf("%w: Lease(%s): want a positive duration", ErrInvalidOption, d)
		}
		c.lease = d
	}
}

// TTL sets how long a completed key is remembered, overriding
// [idempotency.DefaultTTL]. d must be positive.
func TTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 && c.err == nil {
			c.err = fmt.Errorf("%w: TTL(%s): want a positive duration", ErrInvalidOption, d)
		}
		c.ttl = d
	}
}

// Store is an [idempotency.Store] in this process's memory.
type Store struct {
	cfg config

	mu      sync.Mutex
	recs    map[string]*record
	nextTok uint64
	swept   int // map size after the last sweep
}

type record struct {
	done    bool
	token   string
	result  []byte
	expires time.Time // lease end (in progress) or record expiry (done)
}

// New returns an empty Store.
func New(opts ...Option) (*Store, error) {
	c := config{lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL, now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return &Store{cfg: c, recs: make(map[string]*record)}, nil
}

// Claim implements [idempotency.Store]. It never blocks and never fails.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Claim{}, err
	}
	now := s.cfg.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key]
	if r != nil && now.Before(r.expires) {
		if r.done {
			return idempotency.Claim{State: idempotency.Done, Result: append([]byte(nil), r.result...)}, nil
		}
		return idempotency.Claim{State: idempotency.InProgress, Until: r.expires}, nil
	}
	if r == nil {
		s.sweep(now)
		r = &record{}
		s.recs[key] = r
	}
	s.nextTok++
	*r = record{token: strconv.FormatUint(s.nextTok, 36), expires: now.Add(s.cfg.lease)}
	return idempotency.Claim{State: idempotency.New, Token: r.token, Until: r.expires}, nil
}

// sweep drops expired records once the map has doubled since the last
// sweep, so that memory stays proportional to the live records.
func (s *Store) sweep(now time.Time) {
	if len(s.recs) < 2*s.swept+1024 {
		return
	}
	for k, r := range s.recs {
		if !now.Before(r.expires) {
			delete(s.recs, k)
		}
	}
	s.swept = len(s.recs)
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	now := s.cfg.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key]
	switch {
	case r == nil || !now.Before(r.expires):
		r = &record{}
		s.recs[key] = r
	case r.done:
		return nil
	case r.token != token:
		return fmt.Errorf("idempotency/memory: complete %q: %w", key, idempotency.ErrLeaseLost)
	}
	*r = record{done: true, result: append([]byte(nil), result...), expires: now.Add(s.cfg.ttl)}
	return nil
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key, token string) error {
	now := s.cfg.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key]
	switch {
	case r == nil || !now.Before(r.expires):
		delete(s.recs, key)
		return nil
	case r.done || r.token != token:
		return fmt.Errorf("idempotency/memory: release %q: %w", key, idempotency.ErrLeaseLost)
	}
	delete(s.recs, key)
	return nil
}

// Len returns the number of records held, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}
