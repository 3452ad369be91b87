package memstore

import (
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/internal/storelog"
)

// ErrInvalidOption is wrapped by the errors [NewStore] and [NewLot] return
// for an invalid option. It is [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// A StoreOption configures [NewStore]. Options are made by the functions
// of this package; the interface is sealed.
type StoreOption interface{ applyStore(*storeConfig) }

// A LotOption configures [NewLot].
type LotOption interface{ applyLot(*lotConfig) }

// An Option configures every constructor of the package: [WithLogger].
type Option interface {
	StoreOption
	LotOption
}

type storeConfig struct {
	lease, ttl time.Duration
	log        *slog.Logger
}

type lotConfig struct {
	log *slog.Logger
}

type storeOption func(*storeConfig)

func (o storeOption) applyStore(c *storeConfig) { o(c) }

type logOption struct{ l *slog.Logger }

func (o logOption) applyStore(c *storeConfig) { c.log = o.l }
func (o logOption) applyLot(c *lotConfig)     { c.log = o.l }

// WithLogger sets the logger of a Store or Lot, overriding slog.Default().
// A Store logs, at warn level, a lease lost to another consumer; a Lot
// logs a key parked or dropped (warn) and unparked (info).
func WithLogger(l *slog.Logger) Option { return logOption{l} }

// Lease sets how long a claim is held before another caller may take it
// over, overriding [idempotency.DefaultLease]. d must be at least 1ms.
func Lease(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.lease = d })
}

// TTL sets how long a completed key is remembered, overriding
// [idempotency.DefaultTTL]. d must be at least 1ms.
func TTL(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.ttl = d })
}

func newStoreConfig(opts []StoreOption) storeConfig {
	c := storeConfig{lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyStore(&c)
		}
	}
	return c
}

func newLotConfig(opts []LotOption) (lotConfig, error) {
	c := lotConfig{log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyLot(&c)
		}
	}
	return c, storelog.Check("memstore", c.log)
}
