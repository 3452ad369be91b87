package jetstream

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Publish sends m to its topic's stream with Nats-Msg-Id set to m.ID and
// waits for the stream's acknowledgement (PubAck). A PubAck that reports a
// duplicate (the stream already stored that ID within its duplicate
// window) is a success: the message is there once.
//
// The first publish to a topic that no stream captures creates the stream
// (unless create=false) and is sent again; nothing was stored by the
// first try. A refused message is an error wrapping
// [transport.ErrInvalidMessage] (a header NATS cannot carry or one the
// transport reserves, a Key that is not a subject token with key_subject)
// or [transport.ErrTooLarge], and nothing is sent. An error the server returned (a stream limit) is a
// plain failure: nothing was stored. A timeout, a lost connection or the
// end of ctx while waiting for the PubAck is an error wrapping
// [transport.ErrUnknownOutcome] (and ctx.Err() when ctx ended): publish
// again with the same ID, and the stream dedupes within its window.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	return t.publish(ctx, m, deadLetterID(m))
}

// deadLetterID is the Nats-Msg-Id of a dead letter (a message with the
// dead-letter record): its ID plus its last failure time, so that the DLQ's
// duplicate window does not drop a message dead-lettered again after a
// replay. Other messages use their ID ("").
func deadLetterID(m *handler.Message) string {
	last, ok := m.Headers[transport.HeaderLastFailure]
	if _, dead := m.Headers[transport.HeaderError]; !dead || !ok {
		return ""
	}
	return m.ID + "/dead/" + last
}

// publish is Publish with msgID as the Nats-Msg-Id, if not empty (see
// encode).
func (t *Transport) publish(ctx context.Context, m *handler.Message, msgID string) error {
	if err := t.check(); err != nil {
		return err
	}
	msg, err := t.encode(m, msgID)
	if err != nil {
		return err
	}
	pctx, cancel := t.opCtx(ctx)
	defer cancel()
	_, err = t.js.PublishMsg(pctx, msg, njs.WithRetryAttempts(0))
	if errors.Is(err, njs.ErrNoStreamResponse) {
		// No stream captures the subject: nothing was stored.
		if _, serr := t.streamFor(ctx, m.Topic); serr != nil {
			return t.errf("publish %s: %w", m.Topic, serr)
		}
		t.known.Store(m.Topic, struct{}{})
		_, err = t.js.PublishMsg(pctx, msg, njs.WithRetryAttempts(0))
	}
	if err != nil {
		return t.publishError(ctx, m.Topic, err)
	}
	return nil
}

// publishError classifies err from a publish to topic: a failure when
// nothing can have been stored, otherwise an unknown outcome.
func (t *Transport) publishError(ctx context.Context, topic string, err error) error {
	var apiErr *njs.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, njs.ErrStreamMessageExceedsMaximum):
		return t.errf("publish %s: %w: %w", topic, transport.ErrTooLarge, err)
	case errors.Is(err, njs.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return t.errf("publish %s: no stream answered; nothing was stored: %w", topic, err)
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded),
		errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrBadHeaderMsg), errors.As(err, &apiErr):
		return t.errf("publish %s: not stored: %w", topic, err)
	case ctx.Err() != nil:
		return t.errf("publish %s: %w: %w", topic, transport.ErrUnknownOutcome, ctx.Err())
	default:
		return t.errf("publish %s: %w: %w", topic, transport.ErrUnknownOutcome, err)
	}
}
