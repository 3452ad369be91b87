package redisstore

import (
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
)

// Key prefixes without [Prefix].
const (
	// DefaultStorePrefix is the key prefix of a Store.
	DefaultStorePrefix = "ferry:idem:"
	// DefaultLotPrefix is the key prefix of a Lot.
	DefaultLotPrefix = "ferry:park:"
)

// ErrInvalidOption is wrapped by the errors [NewStore] and [NewLot] return
// for an invalid option or a nil client. It is [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// A StoreOption configures [NewStore]. Options are made by the functions
// of this package; the interface is sealed.
type StoreOption interface{ applyStore(*storeConfig) }

// A LotOption configures [NewLot].
type LotOption interface{ applyLot(*lotConfig) }

// An Option configures every constructor of the package: [Prefix] and
// [WithLogger].
type Option interface {
	StoreOption
	LotOption
}

type storeConfig struct {
	prefix     string
	lease, ttl time.Duration
	log        *slog.Logger
}

type lotConfig struct {
	prefix string
	log    *slog.Logger
}

type storeOption func(*storeConfig)

func (o storeOption) applyStore(c *storeConfig) { o(c) }

type bothOption struct {
	store func(*storeConfig)
	lot   func(*lotConfig)
}

func (o bothOption) applyStore(c *storeConfig) { o.store(c) }
func (o bothOption) applyLot(c *lotConfig)     { o.lot(c) }

// WithLogger sets the logger of a Store or Lot, overriding slog.Default().
// A Store logs, at warn level, a lease lost to another consumer; a Lot
// logs a key parked or dropped (warn) and unparked (info), and a failure
// to read the server's clock.
func WithLogger(l *slog.Logger) Option {
	return bothOption{func(c *storeConfig) { c.log = l }, func(c *lotConfig) { c.log = l }}
}

// Prefix sets the prefix of every Redis key the Store or Lot writes,
// overriding "ferry:idem:" ([DefaultStorePrefix]) for a Store and
// "ferry:park:" ([DefaultLotPrefix]) for a Lot. Give each subscription's
// Store its own, such as "ferry:idem:inventory:": a record's Redis key is
// the prefix followed by the dedupe key. Lots with different prefixes never
// meet; subscriptions sharing a Lot's prefix are kept apart by their names.
func Prefix(p string) Option {
	return bothOption{func(c *storeConfig) { c.prefix = p }, func(c *lotConfig) { c.prefix = p }}
}

// Lease sets how long a claim is held before another consumer may take it
// over (the PX of the claim's SET NX), overriding
// [idempotency.DefaultLease]. Redis counts it in milliseconds: d must be at
// least 1ms.
func Lease(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.lease = d })
}

// TTL sets how long a completed key is remembered (the PX of the done
// record), overriding [idempotency.DefaultTTL]. d must be at least 1ms.
func TTL(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.ttl = d })
}

func newStoreConfig(opts []StoreOption) storeConfig {
	c := storeConfig{prefix: DefaultStorePrefix, lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyStore(&c)
		}
	}
	return c
}

func newLotConfig(opts []LotOption) lotConfig {
	c := lotConfig{prefix: DefaultLotPrefix, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyLot(&c)
		}
	}
	return c
}
