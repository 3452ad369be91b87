package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// ErrRunning is returned by [Relay.Run] when the Relay is already running.
// Run several relays by making several Relays (in one process or many).
var ErrRunning = errors.New("outbox: relay already running")

// cleanupBatch bounds the rows one cleanup statement deletes.
const cleanupBatch = 10000

// Stats are the outbox's figures for metrics: table-wide ones read from the
// database, and this relay's counters.
type Stats struct {
	// Pending is the number of rows not yet published (table-wide).
	Pending int64
	// OldestPending is the age of the oldest pending row, on the database's
	// clock; 0 when nothing is pending (table-wide). Alert on it: it grows
	// when relays are down or a key is stuck behind a row that keeps
	// failing.
	OldestPending time.Duration
	// Failing is the number of pending rows whose last publish failed
	// (table-wide): each blocks its key until it is published.
	Failing int64
	// Published is the number of rows this Relay published and marked since
	// it was made.
	Published int64
	// PublishErrors is the number of failed row publishes of this Relay since
	// it was made (unknown outcomes included).
	PublishErrors int64
}

// Relay publishes the rows of an outbox table through a
// [transport.Publisher], per key in insertion order, at least once.
//
// Any number of Relays (in one process or many) may run on one table: each
// claim locks the rows it takes with FOR UPDATE SKIP LOCKED, and takes a key
// only by its head, the key's oldest pending row. A key whose head another
// relay holds is skipped whole, so two relays never publish rows of one key
// at the same time, and a row is published only once every earlier row of
// its key has been confirmed. See the package documentation for the claim
// in full.
//
// A Relay is safe for concurrent use; Run may be called once at a time.
type Relay struct {
	pool *pgxpool.Pool
	pub  transport.Publisher
	cfg  config
	log  *slog.Logger

	headsSQL, restSQL, markSQL, deleteSQL, failSQL, cleanupSQL, statsSQL string

	running       atomic.Bool
	published     atomic.Int64
	publishErrors atomic.Int64

	// tel instruments the relay (nil without WithTelemetry); last holds
	// the last Stats read, for its gauges.
	tel  *telemetry.Outbox
	last atomic.Pointer[Stats]
}

// NewRelay returns a Relay that publishes the rows of the options' table
// ([DefaultTable] without [Table]) through pub. It does no I/O. A nil pool
// or publisher, or an invalid option, is an error wrapping
// [ErrInvalidOption].
//
// pool must allow at least two connections: the relay holds one to
// LISTEN (unless [NoListen]) and one for each claim while it publishes
// the claim's rows.
func NewRelay(pool *pgxpool.Pool, pub transport.Publisher, opts ...RelayOption) (*Relay, error) {
	if pool == nil || pub == nil {
		return nil, fmt.Errorf("%w: outbox: NewRelay needs a pool and a publisher", ErrInvalidOption)
	}
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyRelay(&c)
		}
	}
	if err := c.validate(true); err != nil {
		return nil, err
	}
	r := &Relay{pool: pool, pub: pub, cfg: c, log: c.logger.With("outbox", c.table)}
	if c.tel != nil {
		r.tel = c.tel.Outbox(c.table)
		r.pub = c.tel.Publisher(pub)
	}
	t := c.table
	const cols = `seq, id, topic, key, payload, headers, attempts, created_at`
	// The heads: pending rows with no earlier pending row of their key
	// (every keyless row is a head of its own), eligible now, locked.
	r.headsSQL = `SELECT ` + cols + ` FROM ` + t + ` o
WHERE o.published_at IS NULL
  AND (o.retry_at IS NULL OR o.retry_at <= clock_timestamp())
  AND (o.key = '' OR NOT EXISTS (
        SELECT 1 FROM ` + t + ` p WHERE p.key = o.key AND p.published_at IS NULL AND p.seq < o.seq))
ORDER BY o.seq
LIMIT $1
FOR UPDATE SKIP LOCKED`
	// The rows behind the claimed heads, up to $3 per key.
	r.restSQL = `SELECT ` + cols + ` FROM (
  SELECT ` + cols + `, row_number() OVER (PARTITION BY key ORDER BY seq) AS rn
  FROM ` + t + `
  WHERE key = ANY($1::text[]) AND published_at IS NULL AND seq <> ALL($2::bigint[])) s
WHERE rn <= $3
ORDER BY seq`
	r.markSQL = `UPDATE ` + t + ` SET published_at = clock_timestamp(), attempts = attempts + 1, retry_at = NULL, last_error = NULL
WHERE seq = ANY($1::bigint[])`
	r.deleteSQL = `DELETE FROM ` + t + ` WHERE seq = ANY($1::bigint[])`
	r.failSQL = `UPDATE ` + t + ` AS o SET attempts = o.attempts + 1, last_error = f.err,
  retry_at = clock_timestamp() + f.ms * interval '1 millisecond'
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(seq, err, ms)
WHERE o.seq = f.seq`
	r.cleanupSQL = `DELETE FROM ` + t + ` WHERE seq = ANY (ARRAY(
  SELECT seq FROM ` + t + ` WHERE published_at IS NOT NULL
    AND published_at <= clock_timestamp() - $1 * interval '1 millisecond' LIMIT $2))`
	r.statsSQL = `SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8,
  count(*) FILTER (WHERE attempts > 0)
FROM ` + t + ` WHERE published_at IS NULL`
	return r, nil
}

// Run publishes pending rows until ctx is cancelled, then returns nil
// after the claim in flight is settled (its publishes bounded by
// [PublishTimeout]): rows confirmed are marked, the others stay pending.
//
// It claims batches back to back while there is work, and otherwise
// waits for a notification from a committing [Outbox.Add] (LISTEN on one
// dedicated connection, re-established after a failure), the poll
// interval, or the stats and cleanup tickers. A database error is logged
// and the claim retried after the poll interval; Run does not return for
// it. It returns [ErrRunning] if this Relay is already running.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)

	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if r.cfg.listen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.listen(ctx, wake)
		}()
	}
	defer wg.Wait()

	poll := time.NewTicker(r.cfg.pollInterval)
	defer poll.Stop()
	var statsC, cleanupC <-chan time.Time
	if r.tel != nil {
		stop := r.tel.Observe(func() (telemetry.OutboxState, bool) {
			s := r.last.Load()
			if s == nil {
				return telemetry.OutboxState{}, false
			}
			return telemetry.OutboxState{Pending: s.Pending, Failing: s.Failing, OldestPending: s.OldestPending}, true
		})
		defer stop()
		r.reportStats(ctx) // the gauges have figures from the start
	}
	if r.cfg.onStats != nil || r.tel != nil {
		t := time.NewTicker(r.cfg.statsInterval)
		defer t.Stop()
		statsC = t.C
	}
	if r.cfg.cleanupInterval > 0 && r.cfg.retention > 0 {
		t := time.NewTicker(r.cfg.cleanupInterval)
		defer t.Stop()
		cleanupC = t.C
	}
	for {
		claimed, err := r.claim(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("outbox: claim failed; retrying after the poll interval", "err", err)
			claimed = 0
		}
		if claimed > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-statsC:
				r.reportStats(ctx)
			case <-cleanupC:
				r.cleanup(ctx)
			default:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		case <-statsC:
			r.reportStats(ctx)
		case <-cleanupC:
			r.cleanup(ctx)
		}
	}
}

// RunOnce makes one claim and publishes it: at most [BatchSize] rows, on
// keys no other relay holds. It returns how many rows it claimed (0 when
// nothing is eligible now) and the first error of the claim's database
// statements; publish failures are not errors here (the rows stay pending
// with a backoff, and [OnPublishError] hears of them). It is for tests,
// tools and programs that drive the relay themselves; Run calls it in a
// loop.
func (r *Relay) RunOnce(ctx context.Context) (int, error) { return r.claim(ctx) }

// Stats returns the outbox's table-wide figures and this relay's counters.
// It costs one query over the pending rows' index.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var age float64
	if err := r.pool.QueryRow(ctx, r.statsSQL).Scan(&s.Pending, &age, &s.Failing); err != nil {
		return Stats{}, fmt.Errorf("outbox: stats of %s: %w", r.cfg.table, err)
	}
	s.OldestPending = time.Duration(age * float64(time.Second))
	s.Published = r.published.Load()
	s.PublishErrors = r.publishErrors.Load()
	return s, nil
}

// Cleanup deletes published rows older than the retention, in statements
// of at most 10000 rows, until none is left or ctx ends, and returns how
// many it deleted. Run calls it every [CleanupInterval]. Several relays
// running it at once is harmless.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := r.pool.Exec(ctx, r.cleanupSQL, r.cfg.retention.Milliseconds(), cleanupBatch)
		if err != nil {
			return total, fmt.Errorf("outbox: cleanup %s: %w", r.cfg.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < cleanupBatch {
			return total, nil
		}
	}
}

func (r *Relay) cleanup(ctx context.Context) {
	if n, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("outbox: cleanup failed", "err", err)
	} else if n > 0 {
		r.log.Debug("outbox: cleanup", "deleted", n)
	}
}

func (r *Relay) reportStats(ctx context.Context) {
	s, err := r.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("outbox: stats failed", "err", err)
		}
		return
	}
	r.last.Store(&s)
	if r.cfg.onStats != nil {
		r.cfg.onStats(s)
	}
}

// listen keeps a LISTEN connection open and signals wake for every
// notification, and once after each (re)connection to catch up on what
// was committed while it was away.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox: LISTEN connection lost; polling until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.pollInterval):
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, signal func()) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // LISTEN state must not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN "`+channelOf(r.cfg.table)+`"`); err != nil {
		return err
	}
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}

// row is one claimed outbox row.
type row struct {
	seq      int64
	attempts int
	created  time.Time
	msg      *handler.Message
}

func scanRows(rows pgx.Rows) ([]row, error) {
	defer rows.Close()
	var out []row
	for rows.Next() {
		var (
			rw      row
			m       handler.Message
			headers []byte
		)
		if err := rows.Scan(&rw.seq, &m.ID, &m.Topic, &m.Key, &m.Payload, &headers, &rw.attempts, &rw.created); err != nil {
			return nil, err
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &m.Headers); err != nil {
				return nil, fmt.Errorf("row %d: headers: %w", rw.seq, err)
			}
		}
		rw.msg = &m
		out = append(out, rw)
	}
	return out, rows.Err()
}

// claim takes one batch in a transaction, publishes it wave by wave, marks
// what was confirmed, backs off what failed, and commits. The transaction
// holds the heads' row locks, and with them the heads' keys, until the
// marks are committed; a crash at any point rolls the marks back and the
// rows are published again (at least once).
func (r *Relay) claim(ctx context.Context) (int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim from %s: %w", r.cfg.table, err)
	}
	// From here the claim is settled even if ctx ends: marking what was
	// published saves republishing it.
	settleCtx := context.WithoutCancel(ctx)
	defer func() { _ = tx.Rollback(settleCtx) }()

	rows, err := tx.Query(ctx, r.headsSQL, r.cfg.batchSize)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim from %s: %w", r.cfg.table, err)
	}
	heads, err := scanRows(rows)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim from %s: %w", r.cfg.table, err)
	}
	if len(heads) == 0 {
		return 0, nil
	}

	// Group the rows per key, heads first. Keyless heads are groups of one.
	groups := make([][]row, 0, len(heads))
	byKey := make(map[string]int, len(heads))
	var keys []string
	var headSeqs []int64
	for _, h := range heads {
		if h.msg.Key != "" {
			byKey[h.msg.Key] = len(groups)
			keys = append(keys, h.msg.Key)
			headSeqs = append(headSeqs, h.seq)
		}
		groups = append(groups, []row{h})
	}
	claimed := len(heads)
	if perKey := (r.cfg.batchSize - len(heads)) / max(1, len(keys)); perKey > 0 && len(keys) > 0 {
		rows, err := tx.Query(ctx, r.restSQL, keys, headSeqs, perKey)
		if err != nil {
			return 0, fmt.Errorf("outbox: claim from %s: %w", r.cfg.table, err)
		}
		rest, err := scanRows(rows)
		if err != nil {
			return 0, fmt.Errorf("outbox: claim from %s: %w", r.cfg.table, err)
		}
		for _, rw := range rest {
			g := byKey[rw.msg.Key]
			if rw.seq < groups[g][len(groups[g])-1].seq {
				// Cannot happen while every writer uses Add (its key lock
				// makes seq order commit order); never publish out of order.
				continue
			}
			groups[g] = append(groups[g], rw)
			claimed++
		}
	}

	// Publish in waves: wave i is the i-th row of every group still
	// unbroken. A group whose row failed publishes nothing more.
	var ok []int64
	var failSeqs, failMS []int64
	var failErrs []string
	broken := make([]bool, len(groups))
	msgs := make([]*handler.Message, 0, len(groups))
	idx := make([]int, 0, len(groups))
	var relaying []*telemetry.Relaying
	for wave := 0; ; wave++ {
		msgs, idx, relaying = msgs[:0], idx[:0], relaying[:0]
		for g, rs := range groups {
			if !broken[g] && wave < len(rs) {
				msgs = append(msgs, rs[wave].msg)
				idx = append(idx, g)
				if r.tel != nil {
					relaying = append(relaying, r.tel.StartRelay(rs[wave].msg, rs[wave].created))
				}
			}
		}
		if len(msgs) == 0 {
			break
		}
		pctx, cancel := context.WithTimeout(settleCtx, r.cfg.publishTimeout)
		err := transport.PublishBatch(pctx, r.pub, msgs)
		cancel()
		var be *transport.BatchError
		if err != nil && (!errors.As(err, &be) || len(be.Errs) != len(msgs)) {
			be = &transport.BatchError{Errs: make([]error, len(msgs))}
			for i := range be.Errs {
				be.Errs[i] = err
			}
		}
		for i, g := range idx {
			rw := groups[g][wave]
			var perr error
			if be != nil {
				perr = be.Errs[i]
			}
			if relaying != nil {
				relaying[i].End(perr)
			}
			if perr == nil {
				ok = append(ok, rw.seq)
				continue
			}
			broken[g] = true
			attempt := rw.attempts + 1
			r.publishErrors.Add(1)
			failSeqs = append(failSeqs, rw.seq)
			failErrs = append(failErrs, truncate(perr.Error(), 1000))
			failMS = append(failMS, r.backoff(attempt).Milliseconds())
			if r.cfg.onPublishError != nil {
				r.cfg.onPublishError(rw.msg, attempt, perr)
			} else {
				r.log.Warn("outbox: publish failed; the row stays pending", "id", rw.msg.ID, "key", rw.msg.Key,
					"topic", rw.msg.Topic, "attempt", attempt, "err", perr)
			}
		}
	}

	b := &pgx.Batch{}
	if len(ok) > 0 {
		if r.cfg.retention == 0 {
			b.Queue(r.deleteSQL, ok)
		} else {
			b.Queue(r.markSQL, ok)
		}
	}
	if len(failSeqs) > 0 {
		b.Queue(r.failSQL, failSeqs, failErrs, failMS)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(settleCtx, b).Close(); err != nil {
			return claimed, fmt.Errorf("outbox: mark %d published row(s) of %s (they will be published again): %w", len(ok), r.cfg.table, err)
		}
	}
	if err := tx.Commit(settleCtx); err != nil {
		return claimed, fmt.Errorf("outbox: commit the marks of %d published row(s) of %s (they will be published again): %w", len(ok), r.cfg.table, err)
	}
	r.published.Add(int64(len(ok)))
	if r.cfg.onPublished != nil && len(ok) > 0 {
		r.cfg.onPublished(len(ok))
	}
	return claimed, nil
}

// backoff is the delay before attempt+1 after attempt failed.
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.minBackoff
	for i := 1; i < attempt && d < r.cfg.maxBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.maxBackoff)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8Valid(s) && len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
