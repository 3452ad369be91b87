package redisstore

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/lease"
)

// Store is an [idempotency.Store] on Redis, in lease mode. Make one with
// [NewStore].
type Store struct {
	l *lease.Store
}

var _ idempotency.Store = (*Store)(nil)

// NewStore returns a Store that keeps its records in Redis through c. It
// does no I/O. c may be a single node, a failover or a cluster client: each
// record is one key, and every operation touches only that key. It returns
// an error wrapping [ErrInvalidOption] for a nil client or an invalid
// option.
func NewStore(c goredis.UniversalClient, opts ...StoreOption) (*Store, error) {
	cfg := newStoreConfig(opts)
	if c == nil {
		return nil, fmt.Errorf("%w: redisstore: NewStore needs a client", ErrInvalidOption)
	}
	if err := lease.Check("redisstore", cfg.lease, cfg.ttl, cfg.log); err != nil {
		return nil, err
	}
	return &Store{l: lease.New(records{c: c, prefix: cfg.prefix}, "redisstore", cfg.lease, cfg.ttl, cfg.log)}, nil
}

// Claim implements [idempotency.Store] with one EVALSHA: SET NX PX for the
// claim, and GET and PTTL for the answer when the key is taken.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	return s.l.Claim(ctx, key)
}

// Complete implements [idempotency.Store] with one atomic script.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	return s.l.Complete(ctx, key, token, result)
}

// Release implements [idempotency.Store] with one atomic script.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.l.Release(ctx, key, token)
}

// records is the Store's [lease.Backend]: one Redis string per key, "p"
// followed by the holder's token while in progress, "d" followed by the
// result once done.
type records struct {
	c      goredis.UniversalClient
	prefix string
}

const (
	inProgress = 'p'
	done       = 'd'
)

// claimScript takes the key with SET NX PX, or reports what holds it, in
// one round trip.
var claimScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
`)

// completeScript turns the caller's claim (or a free key) into a done
// record: 1 done, 2 already done, 0 another holder has it.
var completeScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if string.sub(v, 1, 1) == 'd' then
  return 2
end
return 0
`)

// releaseScript deletes the caller's claim: 1 released or already free, 0
// another holder has it or it is done.
var releaseScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then
  return 1
end
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// Take implements [lease.Backend].
func (r records) Take(ctx context.Context, key, token string, d time.Duration) (lease.Record, error) {
	res, err := claimScript.Run(ctx, r.c, []string{r.prefix + key}, string(inProgress)+token, d.Milliseconds()).Slice()
	if err != nil {
		return lease.Record{}, err
	}
	if n, _ := res[0].(int64); n == 1 {
		return lease.Record{State: idempotency.New}, nil
	}
	v, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	switch {
	case v == "": // expired between SET NX and GET
		return lease.Record{}, nil
	case v[0] == done:
		return lease.Record{State: idempotency.Done, Result: []byte(v[1:])}, nil
	}
	return lease.Record{State: idempotency.InProgress, Left: time.Duration(pttl) * time.Millisecond}, nil
}

// Finish implements [lease.Backend].
func (r records) Finish(ctx context.Context, key, token string, result []byte, ttl time.Duration) (bool, error) {
	n, err := completeScript.Run(ctx, r.c, []string{r.prefix + key},
		string(inProgress)+token, append([]byte{done}, result...), ttl.Milliseconds()).Int()
	return n != 0, err
}

// Free implements [lease.Backend].
func (r records) Free(ctx context.Context, key, token string) (bool, error) {
	n, err := releaseScript.Run(ctx, r.c, []string{r.prefix + key}, string(inProgress)+token).Int()
	return n != 0, err
}
