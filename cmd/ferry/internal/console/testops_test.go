package console_test

import (
	"context"

	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/dlq"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// testOps implements the console's interfaces directly on the scenario's
// transport and lot, releasing in process.
type testOps struct{ s *scenario }

func newTestOps(s *scenario) *testOps { return &testOps{s: s} }

func (o *testOps) Groups(ctx context.Context) ([]console.Group, error) {
	sub := transport.Subscription{Topic: o.s.topic, Group: o.s.group}
	return []console.Group{{Name: o.s.sub, Sub: sub, DLQ: o.s.tr.DLQName(sub)}}, nil
}

func (o *testOps) Lag(ctx context.Context, g console.Group) (console.Sample, error) {
	l, err := o.s.tr.Lag(ctx, g.Sub)
	if err != nil {
		return console.Sample{}, err
	}
	n, err := o.s.tr.Consumed(ctx, g.Sub)
	return console.Sample{Lag: l, Consumed: n}, err
}

func (o *testOps) Semantics(ctx context.Context, g console.Group) (transport.Semantics, error) {
	return o.s.tr.Declare(g.Sub)
}

func (o *testOps) List(ctx context.Context, g console.Group, limit int) ([]dlq.Entry, error) {
	return dlq.List(ctx, o.s.tr, g.DLQ, limit)
}

func (o *testOps) Replay(ctx context.Context, g console.Group, r transport.Replay) (int, error) {
	return dlq.Replay(ctx, o.s.tr, g.DLQ, r)
}

func (o *testOps) Subscriptions(ctx context.Context) ([]string, error) {
	return o.s.lot.Subscriptions(ctx)
}

func (o *testOps) Keys(ctx context.Context, sub string) ([]parking.KeyInfo, error) {
	return o.s.lot.Keys(ctx, sub)
}

func (o *testOps) Messages(ctx context.Context, sub, key string, limit int) ([]parking.Entry, error) {
	return o.s.lot.Messages(ctx, sub, key, 0, limit)
}

func (o *testOps) RequestRelease(ctx context.Context, sub, key, by string) error {
	return o.s.lot.RequestRelease(ctx, sub, key, by)
}

func (o *testOps) Drop(ctx context.Context, sub, key string, a parking.Audit) (parking.Dropped, error) {
	return o.s.lot.Drop(ctx, sub, key, a)
}

func (o *testOps) Audits(ctx context.Context, sub string) ([]parking.Dropped, error) {
	return o.s.lot.Audits(ctx, sub)
}
