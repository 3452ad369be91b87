package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/parkwatch"
	"github.com/ferrymq/ferry/parking"
)

var _ parking.Watcher = (*Lot)(nil)

// channel is the lot's pub/sub channel: the park, unpark and drop scripts
// PUBLISH the subscription on it, in the script that INCRs its version.
func (l *Lot) channel() string { return l.cfg.prefix + "parking" }

func newWatch(l *Lot) *parkwatch.Watch {
	read := func(ctx context.Context, sub string) ([]string, error) {
		_, keys, _, err := l.Snapshot(ctx, sub, -1)
		return keys, err
	}
	return parkwatch.New(l.session, read, l.cfg.log, "redisstore")
}

// errNoPong ends a session whose connection did not answer a ping within
// a heartbeat.
var errNoPong = errors.New("no answer to a ping within the heartbeat")

// session is one SUBSCRIBE connection, until it fails. go-redis would
// reconnect and resubscribe a PubSub silently, losing what was published
// meanwhile: the session ends at the first error instead, so the watch
// re-reads after the next one.
func (l *Lot) session(ctx context.Context, w *parkwatch.Watch) error {
	ps := l.c.Subscribe(ctx)
	defer func() { _ = ps.Close() }()
	// A read does not watch ctx: closing ps ends it at once.
	defer context.AfterFunc(ctx, func() { _ = ps.Close() })()
	sctx, cancel := context.WithTimeout(ctx, parkwatch.IOTTL)
	err := ps.Subscribe(sctx, l.channel())
	cancel()
	if err != nil {
		return err
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, parkwatch.Heartbeat)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return err
			}
			if pinged {
				return errNoPong
			}
			pctx, cancel := context.WithTimeout(ctx, parkwatch.IOTTL)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind != "subscribe" {
				return fmt.Errorf("unexpected %s of %s", m.Kind, m.Channel)
			}
			w.Listening()
		case *goredis.Message:
			w.Heard(m.Payload)
		case *goredis.Pong:
		}
	}
}

// Parked reports from memory whether key is parked on sub; see
// [parking.Watcher]. At the first call the lot SUBSCRIBEs to its channel
// (Prefix + "parking") on a connection of its own, for as long as the lot
// is open ([Lot.Close]).
//
// The guarantee: the script that parks, unparks or drops a key PUBLISHes
// the subscription on the channel, atomically with the change, and Redis
// pushes it to every subscribed connection before it answers the script's
// caller; the lot answers from the keys it read after the last message it
// received about sub, on a connection it knows to be subscribed (a PING
// on it every second when quiet, answered within the next second; on any
// error it answers ok = false until it has subscribed again on a new
// connection and re-read every subscription). A key parked by this
// process is answered by the store until the lot has re-read. A key
// parked by another process is seen here once its message has arrived: it
// is pushed before the parking process even hears that the park is done,
// let alone acks the failed message, so it travels ahead of the key's next
// message to this process (a redelivery to another consumer or a
// rebalance takes at least one more broker round trip), but nothing
// orders the two: that margin is the guarantee, not a fence. A silently
// broken connection is found within about two seconds. On a cluster,
// PUBLISH reaches every node's subscribers.
func (l *Lot) Parked(sub, key string) (parked, ok bool) { return l.w.Parked(sub, key) }

// Close stops the lot's notification connection, if [Lot.Parked] started
// one, and waits for it to end. The lot's other methods keep working; it
// does not close the client.
func (l *Lot) Close() error {
	l.w.Close()
	return nil
}

// changed records that this process changed sub's keys.
func (l *Lot) changed(sub string) { l.w.Changed(sub) }
