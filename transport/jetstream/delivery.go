package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Delivery states.
const (
	stActive   int32 = iota // handed out, unsettled
	stDone                  // acked or nacked
	stReleased              // released by Close
	stRevoked               // its partition's lease was lost
)

// delivery is one message handed to the Router. It implements
// [transport.Delivery] and [transport.Extender].
type delivery struct {
	msg   handler.Message
	s     *stream
	p     *part
	raw   *nats.Msg
	epoch uint64 // the partition's lease epoch when pulled
	recv  int64  // unix nanos of receipt

	state     atomic.Int32
	holdUntil atomic.Int64 // Extend: keep in progress at least until then
}

var (
	_ transport.Delivery = (*delivery)(nil)
	_ transport.Extender = (*delivery)(nil)
)

// Message returns the message; the same pointer every call.
func (d *delivery) Message() *handler.Message { return &d.msg }

func (d *delivery) id() string { return d.msg.Facts().BrokerID }

// settledErr says why a delivery no longer active cannot be settled.
func (d *delivery) settledErr() error {
	switch d.state.Load() {
	case stReleased:
		return fmt.Errorf("jetstream: %s was released by Close: %w", d.id(), transport.ErrClosed)
	case stRevoked:
		return d.revokedErr()
	}
	return transport.ErrSettled
}

func (d *delivery) revokedErr() error {
	return fmt.Errorf("jetstream: %s: the lease on consumer %s was lost; another member gets it: %w", d.id(), d.p.name, transport.ErrRevoked)
}

// begin settles the delivery locally: it fails with an error wrapping
// [transport.ErrRevoked] if the partition's lease moved since the message
// was pulled, and with [transport.ErrSettled] on a second settle.
func (d *delivery) begin() error {
	if d.p.epoch.Load() != d.epoch {
		if d.state.CompareAndSwap(stActive, stRevoked) {
			d.s.untrack(d)
			return d.revokedErr()
		}
		return d.settledErr()
	}
	if !d.state.CompareAndSwap(stActive, stDone) {
		return d.settledErr()
	}
	d.s.untrack(d)
	return nil
}

// Ack sends +ACK for the message. The ack is a fire-and-forget publish on
// the connection (coalesced with the others in its write buffer, flushed
// by Close): a crash or a lost connection before it reaches the server
// causes a redelivery after AckWait, never a loss. On a partition whose
// lease was lost it sends nothing and returns an error wrapping
// [transport.ErrRevoked].
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.begin(); err != nil {
		return err
	}
	if err := d.s.ack(d.raw, ackAck); err != nil {
		return d.s.t.errf("ack %s (it will be redelivered after AckWait): %w", d.id(), err)
	}
	return nil
}

// Nack sends -NAK, with the delay when it is positive (NakWithDelay): the
// server redelivers the message, to this member or another, once the
// delay is over, with Facts.Attempt one higher.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := d.begin(); err != nil {
		return err
	}
	var err error
	if delay > 0 {
		err = d.s.nakDelay(d.raw, delay)
	} else {
		err = d.s.ack(d.raw, ackNak)
	}
	if err != nil {
		return d.s.t.errf("nack %s (it will be redelivered after AckWait): %w", d.id(), err)
	}
	return nil
}

// Extend sends +WPI (InProgress) now, which restarts the message's
// AckWait on the server, and keeps the heartbeat sending it until at
// least dur from now, beyond max_extend if need be. dur of 0 means one
// AckWait.
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	if d.state.Load() != stActive {
		return d.settledErr()
	}
	if d.p.epoch.Load() != d.epoch {
		return d.revokedErr()
	}
	if dur <= 0 {
		dur = d.s.ackWait
	}
	until := time.Now().Add(dur).UnixNano()
	for {
		cur := d.holdUntil.Load()
		if until <= cur || d.holdUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	if err := d.s.ack(d.raw, ackProgress); err != nil {
		return d.s.t.errf("extend %s: %w", d.id(), err)
	}
	return nil
}
