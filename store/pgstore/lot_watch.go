package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/internal/parkwatch"
	"github.com/ferrymq/ferry/parking"
)

var _ parking.Watcher = (*Lot)(nil)

// acquirer is what a *pgxpool.Pool offers for the notification connection.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// channelName is the NOTIFY channel of the lot with table prefix prefix:
// prefix_parking, or a hash of it where that exceeds PostgreSQL's 63-byte
// identifiers (pg_notify refuses longer ones, LISTEN truncates them).
func channelName(prefix string) string {
	if c := prefix + "_parking"; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(prefix))
	return fmt.Sprintf("ferry_parking_%016x", h.Sum64())
}

// newWatch returns the lot's watch, or nil if db cannot lend a connection.
func newWatch(l *Lot) *parkwatch.Watch {
	pool, ok := l.db.(acquirer)
	if !ok {
		return nil
	}
	listen := "LISTEN " + pgx.Identifier{channelName(l.cfg.prefix)}.Sanitize()
	read := func(ctx context.Context, sub string) ([]string, error) {
		_, keys, _, err := l.Snapshot(ctx, sub, -1)
		return keys, err
	}
	return parkwatch.New(func(ctx context.Context, w *parkwatch.Watch) error {
		return session(ctx, w, pool, listen)
	}, read, l.cfg.log, "pgstore")
}

// session is one LISTEN connection, until it fails.
func session(ctx context.Context, w *parkwatch.Watch, pool acquirer, listen string) error {
	actx, cancel := context.WithTimeout(ctx, parkwatch.IOTTL)
	pc, err := pool.Acquire(actx)
	cancel()
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), parkwatch.IOTTL)
		_ = conn.Close(cctx)
		cancel()
	}()
	lctx, cancel := context.WithTimeout(ctx, parkwatch.IOTTL)
	_, err = conn.Exec(lctx, listen)
	cancel()
	if err != nil {
		return err
	}
	w.Listening()
	for {
		nctx, cancel := context.WithTimeout(ctx, parkwatch.Heartbeat)
		n, err := conn.WaitForNotification(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, parkwatch.IOTTL)
			_, err = conn.Exec(pctx, listen) // the ping: a round trip that changes nothing
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		w.Heard(n.Payload)
	}
}

// Parked reports from memory whether key is parked on sub; see
// [parking.Watcher]. It needs db to be a *pgxpool.Pool: the lot takes one
// connection from it (at the first call) to LISTEN on, for as long as the
// lot is open ([Lot.Close]). Otherwise it always answers ok = false.
//
// The guarantee: PostgreSQL sends the notification of a park, unpark or
// drop when its transaction commits, to every listening connection; the
// lot answers from the keys it read after the last notification it
// received about sub, on a connection it knows to be listening (a
// round trip on it every second when quiet; on any error it answers
// ok = false until it has listened again and re-read every
// subscription). A key parked by this process is answered by the store
// until the lot has re-read. A key parked by another process is seen here
// once its notification has arrived: it is sent at the park's commit,
// before the parking process acks the failed message, so it travels ahead
// of the key's next message to this process (a redelivery to another
// consumer or a rebalance takes at least one more broker round trip), but
// PostgreSQL does not order the two: that margin is the guarantee, not a
// fence. A silently broken connection is found within about a second.
func (l *Lot) Parked(sub, key string) (parked, ok bool) {
	if l.w == nil {
		return false, false
	}
	return l.w.Parked(sub, key)
}

// Close stops the lot's notification connection, if [Lot.Parked] started
// one, and waits for it to end. The lot's other methods keep working.
// Close the lot before its pool: a closed pool leaves the lot retrying
// (and warning) until Close.
func (l *Lot) Close() error {
	if l.w != nil {
		l.w.Close()
	}
	return nil
}

// changed records that this process changed sub's keys.
func (l *Lot) changed(sub string) {
	if l.w != nil {
		l.w.Changed(sub)
	}
}
