// Package lease is the lease mode of Ferry's idempotency stores, written
// once: the claim's token and its three answers, completion with a TTL,
// release, [idempotency.ErrLeaseLost], the checks of the lease and TTL,
// and the log lines. Each backend (store/memstore, store/redisstore,
// store/pgstore) supplies only its queries, as a [Backend]; each query must
// be atomic in the backend.
package lease

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/storelog"
)

// Record is what [Backend.Take] found.
type Record struct {
	// State is New (the caller took the key), Done, InProgress (another
	// holder's live claim), or 0: the record the backend saw was gone by
	// its next step (a backend that needs two steps); the caller tries
	// again.
	State idempotency.State
	// Result is the stored result when Done; it belongs to the caller.
	Result []byte
	// Left is the time left on the holder's lease when InProgress, on the
	// backend's clock.
	Left time.Duration
}

// Claim is the answer r gives a caller other than the holder: Done with
// the result, or InProgress until the holder's lease ends (on this
// process's clock).
func (r Record) Claim() idempotency.Claim {
	if r.State == idempotency.Done {
		return idempotency.Claim{State: idempotency.Done, Result: r.Result}
	}
	return idempotency.Claim{State: idempotency.InProgress, Until: time.Now().Add(max(r.Left, 0))}
}

// Backend is the storage of one lease-mode store: one record per key,
// either in progress (with the holder's token, expiring after the lease)
// or done (with a result, expiring after the TTL). A record past its
// expiry counts as absent. Each method is one atomic step of the backend
// (a script, one statement, a mutex), or reports a change between its
// steps as documented.
type Backend interface {
	// Take records key in progress for token, expiring after lease, if it
	// has no live record, and answers New. Otherwise it changes nothing and
	// answers the live record (Done or InProgress), or 0 if that record was
	// gone by the time it was read.
	Take(ctx context.Context, key, token string, lease time.Duration) (Record, error)

	// Finish records key done with result (nil allowed), expiring after
	// ttl, if token holds it or it has no live record, and answers true;
	// it also answers true, changing nothing, if key is done already. It
	// answers false, changing nothing, if another token holds key.
	Finish(ctx context.Context, key, token string, result []byte, ttl time.Duration) (bool, error)

	// Free deletes key's record if token holds it, and answers true; it
	// answers true also when key has no live record. It answers false,
	// changing nothing, when another token holds key or key is done.
	Free(ctx context.Context, key, token string) (bool, error)
}

// Store is an [idempotency.Store] in lease mode over a [Backend].
type Store struct {
	b     Backend
	pkg   string // error prefix: the backend's package
	lease time.Duration
	ttl   time.Duration
	log   *slog.Logger
}

var _ idempotency.Store = (*Store)(nil)

// Check returns an error wrapping [handler.ErrInvalidOption], naming pkg,
// unless lease and ttl are at least 1ms (the precision of every backend's
// expiry) and log is set.
func Check(pkg string, lease, ttl time.Duration, log *slog.Logger) error {
	switch {
	case lease < time.Millisecond:
		return fmt.Errorf("%w: %s: Lease(%s): want at least 1ms", handler.ErrInvalidOption, pkg, lease)
	case ttl < time.Millisecond:
		return fmt.Errorf("%w: %s: TTL(%s): want at least 1ms", handler.ErrInvalidOption, pkg, ttl)
	}
	return storelog.Check(pkg, log)
}

// New returns a Store over b that holds claims for lease and remembers
// completed keys for ttl, names pkg in its errors and logs to log. The
// caller has checked the arguments with [Check].
func New(b Backend, pkg string, lease, ttl time.Duration, log *slog.Logger) *Store {
	return &Store{b: b, pkg: pkg, lease: lease, ttl: ttl, log: log}
}

// Lease returns the Store's lease.
func (s *Store) Lease() time.Duration { return s.lease }

// TTL returns the Store's TTL.
func (s *Store) TTL() time.Duration { return s.ttl }

// Claim implements [idempotency.Store]. The token is random (128 bits), so
// a holder whose lease ended cannot settle the next holder's claim.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	tok := rand.Text()
	for range 3 {
		start := time.Now()
		r, err := s.b.Take(ctx, key, tok, s.lease)
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("%s: claim %q: %w", s.pkg, key, err)
		}
		switch r.State {
		case idempotency.New:
			return idempotency.Claim{State: idempotency.New, Token: tok, Until: start.Add(s.lease)}, nil
		case idempotency.Done, idempotency.InProgress:
			c := r.Claim()
			if c.State == idempotency.InProgress {
				storelog.Held(s.log, key, c.Until)
			}
			return c, nil
		}
		// Released or expired between the backend's steps: claim again.
	}
	return idempotency.Claim{}, fmt.Errorf("%s: claim %q: the key kept changing hands", s.pkg, key)
}

// Complete implements [idempotency.Store].
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	ok, err := s.b.Finish(ctx, key, token, result, s.ttl)
	if err != nil {
		return fmt.Errorf("%s: complete %q: %w", s.pkg, key, err)
	}
	return s.lost(ok, "complete", key)
}

// Release implements [idempotency.Store].
func (s *Store) Release(ctx context.Context, key, token string) error {
	ok, err := s.b.Free(ctx, key, token)
	if err != nil {
		return fmt.Errorf("%s: release %q: %w", s.pkg, key, err)
	}
	return s.lost(ok, "release", key)
}

func (s *Store) lost(ok bool, op, key string) error {
	if ok {
		return nil
	}
	storelog.LeaseLost(s.log, op, key, s.lease)
	return fmt.Errorf("%s: %s %q: %w", s.pkg, op, key, idempotency.ErrLeaseLost)
}
