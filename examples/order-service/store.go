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
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
)

// store is where the service keeps its state: the orders and the outbox
// (written together by the checkout), the stock reservations, and the
// dedupe records of the consumers.
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
	// reserve reserves o's stock; under the Postgres inbox it writes in the
	// inbox transaction.
	reserve(ctx context.Context, o OrderPlaced) error
	// reservations counts the orders with stock reserved, and the units.
	reservations(ctx context.Context) (orders, units int64, err error)
	close()
}

// ---- PostgreSQL ----

// pgStore keeps everything in PostgreSQL: the checkout writes the order row
// and the outbox row in one transaction, an outbox relay publishes, and
// inventory reserves stock in the same transaction as its inbox claim.
type pgStore struct {
	pool   *pgxpool.Pool
	prefix string
	ob     *outbox.Outbox
	in     *pgstore.Inbox
}

func openPostgres(ctx context.Context, url, prefix string) (*pgStore, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// Above the consumers' concurrency: every inventory message in flight
	// holds a connection for its inbox transaction, and the relay holds one
	// to LISTEN and one per claim.
	if pcfg.MaxConns < 32 {
		pcfg.MaxConns = 32
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, err
	}
	s := &pgStore{pool: pool, prefix: prefix}
	// The migration step: explicit, idempotent.
	ddl := `
CREATE TABLE IF NOT EXISTS ` + prefix + `orders (
    order_id  text PRIMARY KEY,
    customer  text NOT NULL,
    total     numeric(12,2) NOT NULL,
    placed_at timestamptz NOT NULL,
    body      jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS ` + prefix + `stock (
    sku      text PRIMARY KEY,
    reserved integer NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS ` + prefix + `reservations (
    order_id text NOT NULL,
    sku      text NOT NULL,
    quantity integer NOT NULL,
    PRIMARY KEY (order_id, sku));`
	if _, err := pool.Exec(ctx, ddl); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if err := outbox.Migrate(ctx, pool, prefix+"outbox"); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pgstore.MigrateIdempotency(ctx, pool, prefix+"idempotency"); err != nil {
		pool.Close()
		return nil, err
	}
	if s.ob, err = outbox.New(outbox.Table(prefix + "outbox")); err != nil {
		pool.Close()
		return nil, err
	}
	if s.in, err = pgstore.NewInbox(pool, pgstore.Table(prefix+"idempotency"), pgstore.Namespace("inventory")); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *pgStore) describe() string {
	return "storage: PostgreSQL (orders and outbox in one transaction, relay publishes; inventory reserves in its inbox transaction)"
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
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`orders (order_id, customer, total, placed_at, body) VALUES ($1, $2, $3, $4, $5)`,
		o.OrderID, o.Customer, o.Total, o.PlacedAt, body); err != nil {
		return err
	}
	if err := s.ob.Add(ctx, tx, events...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *pgStore) runRelay(ctx context.Context, pub transport.Publisher, log *slog.Logger) error {
	r, err := outbox.NewRelay(s.pool, pub, outbox.Table(s.prefix+"outbox"), outbox.WithLogger(log),
		outbox.PollInterval(200*time.Millisecond), outbox.PublishTimeout(10*time.Second))
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func (s *pgStore) inbox() idempotency.Store { return s.in }

func (s *pgStore) leases(ns string) idempotency.Store {
	st, err := pgstore.NewStore(s.pool, pgstore.Table(s.prefix+"idempotency"), pgstore.Namespace(ns), pgstore.Lease(time.Minute))
	if err != nil {
		panic(err) // static options
	}
	return st
}

func (s *pgStore) reserve(ctx context.Context, o OrderPlaced) error {
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	for _, it := range o.Items {
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`stock (sku, reserved) VALUES ($1, $2)
ON CONFLICT (sku) DO UPDATE SET reserved = `+s.prefix+`stock.reserved + excluded.reserved`, it.SKU, it.Quantity); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.prefix+`reservations (order_id, sku, quantity) VALUES ($1, $2, $3)`,
			o.OrderID, it.SKU, it.Quantity); err != nil {
			return err
		}
	}
	return nil
}

func (s *pgStore) reservations(ctx context.Context) (int64, int64, error) {
	var orders, units, stock int64
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT order_id) FROM `+s.prefix+`reservations),
  (SELECT coalesce(sum(quantity), 0) FROM `+s.prefix+`reservations),
  (SELECT coalesce(sum(reserved), 0) FROM `+s.prefix+`stock)`).Scan(&orders, &units, &stock)
	if err == nil && units != stock {
		err = fmt.Errorf("stock says %d units reserved, reservations say %d", stock, units)
	}
	return orders, units, err
}

func (s *pgStore) close() { s.pool.Close() }

// ---- in memory ----

// memStore is the stand-in without PostgreSQL: the "transaction" is a mutex,
// the outbox a slice that a goroutine publishes from (retrying with the same
// ID on failure), and the dedupe stores are in memory. The reservation and
// its dedupe record are not atomic here: a crash between them could reserve
// twice, which the PostgreSQL inbox rules out.
type memStore struct {
	mu       sync.Mutex
	orders   map[string]OrderPlaced
	pending  []*handler.Message
	wake     chan struct{}
	reserved map[string]int // order -> units
	in       *memstore.Store
	lease    map[string]*memstore.Store
}

func newMemStore() *memStore {
	in, _ := memstore.NewStore()
	return &memStore{orders: map[string]OrderPlaced{}, wake: make(chan struct{}, 1),
		reserved: map[string]int{}, in: in, lease: map[string]*memstore.Store{}}
}

func (s *memStore) describe() string {
	return "storage: in memory (no -postgres / FERRY_POSTGRES_URL): an in-memory outbox stand-in publishes, dedupe stores are in memory"
}

func (s *memStore) checkout(ctx context.Context, o OrderPlaced, events []*handler.Message) error {
	s.mu.Lock()
	s.orders[o.OrderID] = o
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
			if err := pub.Publish(context.WithoutCancel(ctx), m); err != nil {
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
		s.lease[ns], _ = memstore.NewStore(memstore.Lease(time.Minute))
	}
	return s.lease[ns]
}

func (s *memStore) reserve(ctx context.Context, o OrderPlaced) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range o.Items {
		s.reserved[o.OrderID] += it.Quantity
	}
	return nil
}

func (s *memStore) reservations(ctx context.Context) (int64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var units int64
	for _, u := range s.reserved {
		units += int64(u)
	}
	return int64(len(s.reserved)), units, nil
}

func (s *memStore) close() {}
