package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/idempotency"
)

// DefaultPrefix is the key prefix of a Store without [Prefix].
const DefaultPrefix = "ferry:idem:"

// ErrInvalidOption is wrapped by the error [New] returns for an invalid
// option or a nil client.
var ErrInvalidOption = errors.New("idempotency/redis: invalid option")

// An Option configures [New].
type Option func(*config)

type config struct {
	prefix     string
	lease, ttl time.Duration
	err        error
}

func (c *config) failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// Prefix sets the prefix of every Redis key the Store writes, overriding
// "ferry:idem:" ([DefaultPrefix]). Give each subscription its own, such as
// "ferry:idem:inventory:". A record's Redis key is the prefix followed by
// the dedupe key.
func Prefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// Lease sets how long a claim is held before another consumer may take it
// over (the PX of the claim's SET NX), overriding
// [idempotency.DefaultLease]. Redis counts it in milliseconds: d must be at
// least 1ms.
func Lease(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.failf("Lease(%s): want at least 1ms", d)
		}
		c.lease = d
	}
}

// TTL sets how long a completed key is remembered (the PX of the done
// record), overriding [idempotency.DefaultTTL]. d must be at least 1ms.
func TTL(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.failf("TTL(%s): want at least 1ms", d)
		}
		c.ttl = d
	}
}

// Store is an [idempotency.Store] on Redis, in lease mode.
type Store struct {
	c   goredis.UniversalClient
	cfg config
}

// New returns a Store that keeps its records in Redis through c. It does no
// I/O. c may be a single node, a failover or a cluster client: each record
// is one key, and every operation touches only that key.
func New(c goredis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := config{prefix: DefaultPrefix, lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if c == nil {
		cfg.failf("nil client")
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	return &Store{c: c, cfg: cfg}, nil
}

// A record's value is "p" + token while in progress, "d" + result when done.
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

// Claim implements [idempotency.Store] with one EVALSHA: SET NX PX for the
// claim, and GET and PTTL for the answer when the key is taken.
func (s *Store) Claim(ctx context.Context, key string) (idempotency.Claim, error) {
	tok, err := token()
	if err != nil {
		return idempotency.Claim{}, err
	}
	start := time.Now()
	res, err := claimScript.Run(ctx, s.c, []string{s.cfg.prefix + key},
		string(inProgress)+tok, s.cfg.lease.Milliseconds()).Slice()
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("idempotency/redis: claim %q: %w", key, err)
	}
	if n, _ := res[0].(int64); n == 1 {
		return idempotency.Claim{State: idempotency.New, Token: tok, Until: start.Add(s.cfg.lease)}, nil
	}
	v, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	if len(v) > 0 && v[0] == done {
		return idempotency.Claim{State: idempotency.Done, Result: []byte(v[1:])}, nil
	}
	return idempotency.Claim{State: idempotency.InProgress, Until: time.Now().Add(time.Duration(max(pttl, 0)) * time.Millisecond)}, nil
}

// Complete implements [idempotency.Store] with one atomic script.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte) error {
	n, err := completeScript.Run(ctx, s.c, []string{s.cfg.prefix + key},
		string(inProgress)+token, append([]byte{done}, result...), s.cfg.ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("idempotency/redis: complete %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("idempotency/redis: complete %q: %w", key, idempotency.ErrLeaseLost)
	}
	return nil
}

// Release implements [idempotency.Store] with one atomic script.
func (s *Store) Release(ctx context.Context, key, token string) error {
	n, err := releaseScript.Run(ctx, s.c, []string{s.cfg.prefix + key}, string(inProgress)+token).Int()
	if err != nil {
		return fmt.Errorf("idempotency/redis: release %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("idempotency/redis: release %q: %w", key, idempotency.ErrLeaseLost)
	}
	return nil
}

func token() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idempotency/redis: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
