// Package scheduletest runs a schedule.Scheduler for a test: the durable
// delayed delivery of transports without their own (Kafka, MQTT,
// JetStream 2.9), for their transporttest.DelayMaker harnesses.
package scheduletest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/schedule"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// Start migrates a schedule table of its own on the test PostgreSQL and
// runs a Scheduler over it, publishing through p, until tb ends; the table
// is dropped then.
func Start(tb testing.TB, p transport.Publisher) *schedule.Scheduler {
	tb.Helper()
	db := testenv.Postgres(tb, 4)
	table := strings.ReplaceAll(transporttest.UniqueName(tb, "sched"), "-", "_")
	ctx := context.Background()
	if err := schedule.Migrate(ctx, db, table); err != nil {
		tb.Fatal(err)
	}
	s, err := schedule.New(db, p, schedule.Table(table), schedule.Poll(50*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(rctx)
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
		_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
	})
	return s
}
