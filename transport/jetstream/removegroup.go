package jetstream

import (
	"context"
	"errors"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/transport"
)

var _ transport.GroupRemover = (*Transport)(nil)

// RemoveGroup deletes the durable consumers of sub.Group on sub.Topic (one
// per partition), with their positions and pending acks; the messages stay
// in the stream. The server does not say whether a member is alive, so stop
// the group's consumers first. A group with no consumer is an error
// wrapping transport.ErrNotFound.
func (t *Transport) RemoveGroup(ctx context.Context, sub transport.Subscription) error {
	if err := t.check(); err != nil {
		return err
	}
	pl, err := t.plan(sub)
	if err != nil {
		return err
	}
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	name, err := t.cfg.stream, error(nil)
	if name == "" {
		name, err = t.js.StreamNameBySubject(ctx, pl.topic)
	}
	if errors.Is(err, njs.ErrStreamNotFound) {
		return t.errf("remove group of %s: no stream captures it: %w", pl.topic, transport.ErrNotFound)
	}
	if err != nil {
		return t.errf("remove group of %s: %w", pl.topic, err)
	}
	st, err := t.js.Stream(ctx, name)
	if err != nil {
		return t.streamError(name, pl.topic, err)
	}
	s := newStream(t, pl, st) // for the partitions' names only
	s.bgCancel()
	removed := 0
	for _, p := range s.parts {
		err := st.DeleteConsumer(ctx, p.name)
		switch {
		case errors.Is(err, njs.ErrConsumerNotFound):
		case err != nil:
			return t.errf("remove group of %s: consumer %s: %w", pl.topic, p.name, err)
		default:
			removed++
		}
	}
	if removed == 0 {
		return t.errf("remove group of %s: no consumer of the group in stream %s: %w", pl.topic, name, transport.ErrNotFound)
	}
	return nil
}
