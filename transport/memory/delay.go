package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

var _ transport.DelayPublisher = (*Transport)(nil)

// delayPrecision is what DelaySemantics declares: a Go timer's lateness on
// a busy machine, with room.
const delayPrecision = 50 * time.Millisecond

// DelaySemantics implements [transport.DelayPublisher]: any delay, within
// 50ms, held in the broker's process (not durable: it ends with the
// process, like every memory message).
func (c *Transport) DelaySemantics() transport.DelaySemantics {
	return transport.DelaySemantics{Precision: delayPrecision, Mechanism: "memory timer", Durable: false}
}

// PublishAt implements [transport.DelayPublisher]: the broker keeps a copy
// of m and publishes it, as Publish does, when at comes. The copy belongs
// to the broker, not to this handle: it is published even if this handle
// is closed first, and dropped only if the broker is. Errors Publish would
// return for m (no topic, too large, closed) are returned now.
func (c *Transport) PublishAt(ctx context.Context, m *handler.Message, at time.Time) error {
	if err := c.check(); err != nil {
		return fmt.Errorf("memory: publish %q at %s: %w", m.ID, at.Format(time.RFC3339Nano), err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: publish %q: %w", m.ID, err)
	}
	if m.Topic == "" {
		return fmt.Errorf("%w: memory: publish %q: empty topic", transport.ErrInvalidMessage, m.ID)
	}
	if max := c.b.sem.MaxPayload; max > 0 && len(m.Payload) > max {
		return fmt.Errorf("memory: publish %q: %d bytes, at most %d: %w", m.ID, len(m.Payload), max, transport.ErrTooLarge)
	}
	d, err := transport.CheckDelay(m, at, 0)
	if err != nil {
		return err
	}
	cp := m.Clone()
	b := c.b
	time.AfterFunc(d, func() {
		h := b.connect()
		defer func() { _ = h.Close(context.Background()) }()
		// Checked above: only the broker's Close can fail it now, and then
		// every message of the broker is gone anyway.
		_ = h.Publish(context.Background(), cp)
	})
	return nil
}
