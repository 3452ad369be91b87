package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// store is where the service keeps its state: the orders and the outbox
// (written together by the checkout), the stock reservations, the dedupe
// records of the consumers and inventory's parking lot. Every row carries
// the shop (the run's namespace), so runs never collide.
type store interface {
	// describe says what the store is, for the first line of output.
	describe() string
	// checkout writes the order and its events into the outbox atomically.
	checkout(ctx context.Context, o OrderPlaced, events []*handler.Message) error
	// runRelay publishes the outbox through pub until ctx ends.
	runRelay(ctx context.Context, pub transport.Publisher, log *slog.Logger) error
	// inbox is inventory's dedupe store: transactional with the
	// reservation where it can be.
	inbox() idempotency.Store
	// leases returns a lease-mode dedupe store for the subscription ns.
	leases(ns string) idempotency.Store
	// lot is inventory's parking lot.
	lot() parking.Lot
	// reserve reserves o's stock; under the PostgreSQL inbox it writes in
	// the inbox transaction.
	reserve(ctx context.Context, o OrderPlaced) error
	// reservations counts the shop's orders with stock reserved, and the
	// units.
	reservations(ctx context.Context, shop string) (orders, units int64, err error)
	close()
}

// ---- PostgreSQL ----

// pgStore keeps everything in PostgreSQL: the checkout writes the order row
// and the outbox row in one transaction, an outbox relay publishes,
// inventory reserves stock in the same transaction as its inbox claim, and
// its parked keys are in PostgreSQL too.
type pgStore struct {
	pool   *pgxpool.Pool
	prefix string
	ob     *outbox.Outbox
	in     *pgstore.Inbox
	parked *pgstore.Lot
	log    *slog.Logger
	tel    *telemetry.Telemetry // nil without -http

	mu    sync.Mutex
	lease map[string]*pgstore.Store
}

func openPostgres(ctx context.Context, url, prefix string, log *slog.Logger, tel *telemetry.Telemetry) (*pgStore, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// Every inventory message in flight holds a connection for its inbox
	// transaction (inventory runs 4 at a time), and the relay holds one to
	// LISTEN.
	if pcfg.MaxConns < 10 {
		pcfg.MaxConns = 10
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	s := &pgStore{pool: pool, prefix: prefix, log: log, tel: tel, lease: map[string]*pgstore.Store{}}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// migrate is the migration step: explicit, idempotent, and safe to run
// from several processes at once.
func (s *pgStore) migrate(ctx context.Context) error {
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p := s.prefix
	ddl := `
SELECT pg_advisory_xact_lock(hashtext('ferry-order-service:` + p + `'));
CREATE TABLE IF NOT EXISTS ` + p + `orders (
    shop      text NOT NULL,
    order_id  text NOT NULL,
    customer  text NOT NULL,
    total     numeric(12,2) NOT NULL,
    placed_at timestamptz NOT NULL,
    body      jsonb NOT NULL,
    PRIMARY KEY (shop, order_id));
CREATE TABLE IF NOT EXISTS ` + p + `stock (
    shop     text NOT NULL,
    sku      text NOT NULL,
    reserved integer NOT NULL DEFAULT 0,
    PRIMARY KEY (shop, sku));
CREATE TABLE IF NOT EXISTS ` + p + `reservations (
    shop     text NOT NULL,
    order_id text NOT NULL,
    sku      text NOT NULL,
    quantity integer NOT NULL,
    PRIMARY KEY (shop, order_id, sku));`
	tx, err := s.pool.Begin(mctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(mctx, ddl); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := tx.Commit(mctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := outbox.Migrate(mctx, s.pool, p+"outbox"); err != nil {
		return err
	}
	if err := pgstore.MigrateIdempotency(mctx, s.pool, p+"idempotency"); err != nil {
		return err
	}
	if err := pgstore.MigrateParking(mctx, s.pool, p+"parking"); err != nil {
		return err
	}
	obOpts := []outbox.Option{outbox.Table(p + "outbox")}
	if s.tel != nil {
		obOpts = append(obOpts, outbox.WithTelemetry(s.tel)) // a create span per row, its context stored with it
	}
	if s.ob, err = outbox.New(obOpts...); err != nil {
		return err
	}
	if s.in, err = pgstore.NewInbox(s.pool, pgstore.Table(p+"idempotency"), pgstore.Namespace("inventory"), pgstore.WithLogger(s.log)); err != nil {
		return err
	}
	s.parked, err = pgstore.NewLot(s.pool, pgstore.TablePrefix(p+"parking"), pgstore.WithLogger(s.log))
	return err
}

func (s *pgStore) describe() string {
	return "PostgreSQL (orders and outbox in one transaction; inventory reserves in its inbox transaction; parked keys in PostgreSQL)"
}

func (s *pgStore) checkout(ctx context.Context, o OrderPlaced, events []*handler.Message) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`orders (shop, order_id, customer, total, placed_at, body) VALUES ($1, $2, $3, $4, $5, $6)`,
		o.Shop, o.OrderID, o.Customer, o.Total, o.PlacedAt, body); err != nil {
		return err
	}
	if err := s.ob.Add(ctx, tx, events...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *pgStore) runRelay(ctx context.Context, pub transport.Publisher, log *slog.Logger) error {
	opts := []outbox.RelayOption{outbox.Table(s.prefix + "outbox"), outbox.WithLogger(log),
		outbox.PollInterval(200 * time.Millisecond), outbox.PublishTimeout(10 * time.Second)}
	if s.tel != nil {
		// The relay spans, and the outbox gauges read every 2 seconds.
		opts = append(opts, outbox.WithTelemetry(s.tel), outbox.OnStats(2*time.Second, func(outbox.Stats) {}))
	}
	r, err := outbox.NewRelay(s.pool, pub, opts...)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func (s *pgStore) inbox() idempotency.Store { return s.in }

func (s *pgStore) leases(ns string) idempotency.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease[ns] == nil {
		st, err := pgstore.NewStore(s.pool, pgstore.Table(s.prefix+"idempotency"), pgstore.Namespace(ns),
			pgstore.Lease(time.Minute), pgstore.WithLogger(s.log))
		if err != nil {
			panic(err) // static options, checked by the tests
		}
		s.lease[ns] = st
	}
	return s.lease[ns]
}

func (s *pgStore) lot() parking.Lot { return s.parked }

func (s *pgStore) reserve(ctx context.Context, o OrderPlaced) error {
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	for _, it := range o.Items {
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`stock (shop, sku, reserved) VALUES ($1, $2, $3)
ON CONFLICT (shop, sku) DO UPDATE SET reserved = `+s.prefix+`stock.reserved + excluded.reserved`, o.Shop, it.SKU, it.Quantity); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`reservations (shop, order_id, sku, quantity) VALUES ($1, $2, $3, $4)`,
			o.Shop, o.OrderID, it.SKU, it.Quantity); err != nil {
			return err
		}
	}
	return nil
}

func (s *pgStore) reservations(ctx context.Context, shop string) (int64, int64, error) {
	var orders, units, stock int64
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT order_id) FROM `+s.prefix+`reservations WHERE shop = $1),
  (SELECT coalesce(sum(quantity), 0) FROM `+s.prefix+`reservations WHERE shop = $1),
  (SELECT coalesce(sum(reserved), 0) FROM `+s.prefix+`stock WHERE shop = $1)`, shop).Scan(&orders, &units, &stock)
	if err == nil && units != stock {
		err = fmt.Errorf("stock says %d units reserved, reservations say %d", stock, units)
	}
	return orders, units, err
}

func (s *pgStore) close() {
	_ = s.parked.Close() // its LISTEN connection, before the pool
	s.pool.Close()
}

// ---- in memory ----

// memStore is the stand-in without PostgreSQL: the "transaction" is a mutex,
// the outbox a slice that a goroutine publishes from (retrying with the same
// ID on failure), and the dedupe stores and the lot are in memory. The
// reservation and its dedupe record are not atomic here: a crash between
// them could reserve twice, which the PostgreSQL inbox rules out.
type memStore struct {
	mu       sync.Mutex
	orders   map[string]OrderPlaced // shop/order
	pending  []*handler.Message
	wake     chan struct{}
	reserved map[string]map[string]int64 // shop → order → units
	in       *memstore.Store
	lease    map[string]*memstore.Store
	parked   *memstore.Lot
}

func newMemStore(log *slog.Logger) (*memStore, error) {
	in, err := memstore.NewStore(memstore.WithLogger(log))
	if err != nil {
		return nil, err
	}
	lot, err := memstore.NewLot(memstore.WithLogger(log))
	if err != nil {
		return nil, err
	}
	return &memStore{orders: map[string]OrderPlaced{}, wake: make(chan struct{}, 1),
		reserved: map[string]map[string]int64{}, in: in, lease: map[string]*memstore.Store{}, parked: lot}, nil
}

func (s *memStore) describe() string {
	return "in memory (no -postgres): an outbox stand-in publishes; dedupe records and parked keys in memory"
}

func (s *memStore) checkout(ctx context.Context, o OrderPlaced, events []*handler.Message) error {
	s.mu.Lock()
	if _, dup := s.orders[o.Shop+"/"+o.OrderID]; dup {
		s.mu.Unlock()
		return fmt.Errorf("order %s exists", o.OrderID)
	}
	s.orders[o.Shop+"/"+o.OrderID] = o
	for _, m := range events {
		s.pending = append(s.pending, m.Clone())
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *memStore) runRelay(ctx context.Context, pub transport.Publisher, log *slog.Logger) error {
	for {
		s.mu.Lock()
		batch := s.pending
		s.mu.Unlock()
		sent := 0
		for _, m := range batch { // one at a time, in order: the first failure stops the rest
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := pub.Publish(pctx, m)
			cancel()
			if err != nil {
				log.Warn("outbox stand-in: publish failed; retrying with the same ID", "id", m.ID, "err", err)
				break
			}
			sent++
		}
		s.mu.Lock()
		s.pending = s.pending[sent:]
		left := len(s.pending)
		s.mu.Unlock()
		if left > 0 && sent > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *memStore) inbox() idempotency.Store { return s.in }

func (s *memStore) leases(ns string) idempotency.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease[ns] == nil {
		st, err := memstore.NewStore(memstore.Lease(time.Minute))
		if err != nil {
			panic(err) // static options, checked by the tests
		}
		s.lease[ns] = st
	}
	return s.lease[ns]
}

func (s *memStore) lot() parking.Lot { return s.parked }

func (s *memStore) reserve(ctx context.Context, o OrderPlaced) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved[o.Shop] == nil {
		s.reserved[o.Shop] = map[string]int64{}
	}
	if _, dup := s.reserved[o.Shop][o.OrderID]; dup {
		return fmt.Errorf("order %s: stock reserved already", o.OrderID)
	}
	s.reserved[o.Shop][o.OrderID] = o.units()
	return nil
}

func (s *memStore) reservations(ctx context.Context, shop string) (int64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var units int64
	for _, u := range s.reserved[shop] {
		units += u
	}
	return int64(len(s.reserved[shop])), units, nil
}

func (s *memStore) close() {}
