package pgstore

import (
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
)

// DefaultLockWait is how long a transactional claim waits for another open
// transaction holding the same key; see [LockWait].
const DefaultLockWait = 5 * time.Second

// ErrInvalidOption is wrapped by the errors the constructors and the
// schema functions return for an invalid option, table name or a nil
// database. It is [handler.ErrInvalidOption].
var ErrInvalidOption = handler.ErrInvalidOption

// An InboxOption configures [NewInbox]: every [StoreOption], and
// [LockWait]. Options are made by the functions of this package; the
// interfaces are sealed.
type InboxOption interface{ applyInbox(*storeConfig) }

// A StoreOption configures [NewStore] and [NewInbox].
type StoreOption interface {
	InboxOption
	applyStore(*storeConfig)
}

// A LotOption configures [NewLot].
type LotOption interface{ applyLot(*lotConfig) }

// An Option configures every constructor of the package: [WithLogger].
type Option interface {
	StoreOption
	LotOption
}

type storeConfig struct {
	table      string
	namespace  string
	lease, ttl time.Duration
	lockWait   time.Duration
	log        *slog.Logger
}

type lotConfig struct {
	prefix string
	log    *slog.Logger
}

type storeOption func(*storeConfig)

func (o storeOption) applyStore(c *storeConfig) { o(c) }
func (o storeOption) applyInbox(c *storeConfig) { o(c) }

type inboxOption func(*storeConfig)

func (o inboxOption) applyInbox(c *storeConfig) { o(c) }

type lotOption func(*lotConfig)

func (o lotOption) applyLot(c *lotConfig) { o(c) }

type logOption struct{ l *slog.Logger }

func (o logOption) applyStore(c *storeConfig) { c.log = o.l }
func (o logOption) applyInbox(c *storeConfig) { c.log = o.l }
func (o logOption) applyLot(c *lotConfig)     { c.log = o.l }

// WithLogger sets the logger of a Store, Inbox or Lot, overriding
// slog.Default(). A Store or Inbox logs a lease lost to another consumer
// (warn), a claim that waited [LockWait] in vain (info) and the failures of
// [Store.RunCleanup] (warn); a Lot logs a key parked or dropped (warn) and
// unparked (info).
func WithLogger(l *slog.Logger) Option { return logOption{l} }

// Table sets the records table of a Store or Inbox, overriding
// "ferry_idempotency" ([DefaultIdempotencyTable]). It must have been
// created with [MigrateIdempotency] (or [IdempotencySchema]). name is
// "table" or "schema.table", in lower case.
func Table(name string) StoreOption {
	return storeOption(func(c *storeConfig) { c.table = name })
}

// Namespace sets the namespace column of the records, overriding "".
// Records of different namespaces never meet, so subscriptions can share
// one table: give each its own namespace, such as its name.
func Namespace(ns string) StoreOption {
	return storeOption(func(c *storeConfig) { c.namespace = ns })
}

// Lease sets how long a lease-mode claim is held before another consumer
// may take it over, overriding [idempotency.DefaultLease]. The database's
// clock (clock_timestamp()) measures it, so consumers' clocks need not
// agree. d must be at least 1ms.
func Lease(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.lease = d })
}

// TTL sets how long a completed key is remembered, overriding
// [idempotency.DefaultTTL]: until then a duplicate is skipped, and after it
// the record is ignored and may be deleted by [Store.Cleanup]. d must be at
// least 1ms.
func TTL(d time.Duration) StoreOption {
	return storeOption(func(c *storeConfig) { c.ttl = d })
}

// LockWait bounds how long a transactional claim ([Inbox.Begin]) waits for
// another consumer's open transaction on the same key (its lock_timeout),
// overriding 5s ([DefaultLockWait]). When the wait ends the claim answers
// InProgress, and the dedupe middleware hands the message back to the
// broker with that delay. d must be at least 1ms.
func LockWait(d time.Duration) InboxOption {
	return inboxOption(func(c *storeConfig) { c.lockWait = d })
}

// TablePrefix sets the prefix of a Lot's tables, overriding
// "ferry_parking" ([DefaultParkingPrefix]): the tables are <prefix>_keys,
// <prefix>_messages, <prefix>_versions and <prefix>_audit. They must have
// been created with [MigrateParking] (or [ParkingSchema]). prefix is
// "name" or "schema.name", in lower case.
func TablePrefix(prefix string) LotOption {
	return lotOption(func(c *lotConfig) { c.prefix = prefix })
}

func defaultStoreConfig() storeConfig {
	return storeConfig{table: DefaultIdempotencyTable, lease: idempotency.DefaultLease, ttl: idempotency.DefaultTTL,
		lockWait: DefaultLockWait, log: slog.Default()}
}

func newLotConfig(opts []LotOption) lotConfig {
	c := lotConfig{prefix: DefaultParkingPrefix, log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyLot(&c)
		}
	}
	return c
}
