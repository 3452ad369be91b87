package schedule_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/schedule"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// flaky fails its first n publishes.
type flaky struct {
	transport.Publisher
	fail atomic.Int32
}

func (f *flaky) Publish(ctx context.Context, m *handler.Message) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("broker down")
	}
	return f.Publisher.Publish(ctx, m)
}

func newScheduler(t *testing.T, pub transport.Publisher) (*schedule.Scheduler, func(string) int) {
	t.Helper()
	db := testenv.Postgres(t, 4)
	table := strings.ReplaceAll(transporttest.UniqueName(t, "sched"), "-", "_")
	if err := schedule.Migrate(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `DROP TABLE `+table) })
	s, err := schedule.New(db, pub, schedule.Table(table))
	if err != nil {
		t.Fatal(err)
	}
	rows := func(where string) int {
		var n int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return s, rows
}

// TestScheduler: a message is not published before its time, is published
// by the claim after it, and is deleted then; a publish that failed leaves
// its row for the next claim: nothing is lost.
func TestScheduler(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	pub := &flaky{Publisher: b}
	pub.fail.Store(1)
	s, rows := newScheduler(t, pub)
	ctx := context.Background()
	m := &handler.Message{ID: "e1", Key: "k", Topic: "due", Payload: []byte("x"), Headers: map[string]string{"h": "v"}}
	if err := s.PublishAt(ctx, m, time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce before the time = %d, %v; want 0, nil", n, err)
	}
	time.Sleep(350 * time.Millisecond)
	if n, err := s.RunOnce(ctx); err == nil || n != 0 {
		t.Fatalf("RunOnce with the broker down = %d, %v; want 0 and an error", n, err)
	}
	if got := rows("id = 'e1'"); got != 1 {
		t.Fatalf("%d rows of e1 after a failed publish; want it kept", got)
	}
	if n, err := s.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1, nil", n, err)
	}
	if got := rows("true"); got != 0 {
		t.Fatalf("%d rows left after the publish", got)
	}
	st, err := b.Subscribe(ctx, transport.Subscription{Topic: "due", Group: "g", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatalf("nothing published: %v", err)
	}
	if r := d.Message(); r.ID != "e1" || r.Key != "k" || string(r.Payload) != "x" || r.Headers["h"] != "v" {
		t.Errorf("published %+v; want the scheduled message as it was", r)
	}
}

// TestSchedulerOptions: bad arguments are errors wrapping ErrInvalidOption.
func TestSchedulerOptions(t *testing.T) {
	b := routertest.NewBroker(t, 1)
	db := testenv.Postgres(t, 1)
	for name, err := range map[string]error{
		"nil db":    func() error { _, err := schedule.New(nil, b); return err }(),
		"poll":      func() error { _, err := schedule.New(db, b, schedule.Poll(time.Millisecond)); return err }(),
		"batch":     func() error { _, err := schedule.New(db, b, schedule.BatchSize(0)); return err }(),
		"table":     func() error { _, err := schedule.New(db, b, schedule.Table("x;drop")); return err }(),
		"no logger": func() error { _, err := schedule.New(db, b, schedule.WithLogger(nil)); return err }(),
	} {
		if !errors.Is(err, schedule.ErrInvalidOption) {
			t.Errorf("%s: %v; want ErrInvalidOption", name, err)
		}
	}
	s, err := schedule.New(db, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PublishAt(context.Background(), &handler.Message{ID: "x"}, time.Now()); !errors.Is(err, transport.ErrInvalidMessage) {
		t.Errorf("PublishAt without a topic: %v; want ErrInvalidMessage", err)
	}
}
