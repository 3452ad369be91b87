package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrMaxDeliveries is the cause in the record of a message that
// [MaxDeliveries] dead-lettered: it was delivered that many times without
// an ack.
var ErrMaxDeliveries = errors.New("jetstream: delivered max_deliveries times without an ack")

// deadLetter publishes raw, delivered more than max_deliveries times, to
// the subscription's DLQ with the dead-letter record, waits for the
// PubAck, then terminates it (Term) so that the server never delivers it
// again. If the publish fails the message is Nacked for a second and
// dead-lettered at its next delivery; a crash in between redelivers it,
// and the DLQ's duplicate window drops the second copy (same Nats-Msg-Id).
func (s *stream) deadLetter(p *part, raw *nats.Msg, md meta) {
	now := time.Now()
	m := &handler.Message{}
	decode(m, raw.Subject, raw.Data, raw.Header, s.topic)
	f := facts(s.name, md, p.idx, now)
	f.Group = s.pl.group
	m.SetFacts(f)
	attempts := int(md.delivered) - 1
	cause := fmt.Errorf("%w (%d deliveries, max_deliveries %d)", ErrMaxDeliveries, attempts, s.pl.cc.maxDeliveries)
	dl := transport.NewDeadLetter(m, cause, now)
	dl.Attempts = attempts
	out := dl.Message(m, s.pl.dlq)
	ctx, cancel := context.WithTimeout(context.Background(), s.t.cfg.timeout)
	defer cancel()
	if err := s.t.Publish(ctx, out); err != nil {
		s.log.Warn("jetstream: dead-lettering failed; retrying at the next delivery",
			"id", m.ID, "dlq", s.pl.dlq, "err", err)
		_ = s.nakDelay(raw, time.Second)
		return
	}
	if err := s.ack(raw, ackTerm); err != nil {
		s.log.Warn("jetstream: terminating a dead-lettered message failed; it may be dead-lettered again (same ID)",
			"id", m.ID, "err", err)
	}
	s.log.Info("jetstream: dead-lettered after max_deliveries", "id", m.ID, "dlq", s.pl.dlq, "deliveries", attempts)
}

// ListDLQ returns up to limit messages of the DLQ subject dlq, oldest
// first, without removing them (0 means all). Each carries its original
// ID, Key, Payload and headers plus the dead-letter record, and Facts with
// its stream sequence as Offset. A DLQ that no stream captures returns an
// error wrapping [transport.ErrNotFound].
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	var out []*handler.Message
	err := t.scanDLQ(ctx, dlq, func(m *handler.Message, _ uint64) (bool, error) {
		out = append(out, m)
		return limit <= 0 || len(out) < limit, nil
	})
	return out, err
}

// ReplayDLQ republishes the messages of dlq that r selects, with their ID,
// Key, Payload and original headers, to r.To or their original topic, and
// deletes each from the DLQ's stream once its publish is acknowledged. The
// republished message's Nats-Msg-Id is its ID plus "/replay/" and its place
// in the DLQ (the ID itself travels in ferry-id), so that the topic's
// duplicate window, which saw the original, keeps it, and a replay
// repeated after a failure stores it once. It
// returns how many it replayed. A failure part-way leaves the rest in the
// DLQ; replaying again is safe, consumers dedupe on the ID.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	n := 0
	err := t.scanDLQ(ctx, dlq, func(m *handler.Message, seq uint64) (bool, error) {
		if !r.Selects(m) {
			return true, nil
		}
		to := r.Destination(m)
		if to == "" {
			return false, fmt.Errorf("jetstream: replay %s: message %q has no original topic; set Replay.To", dlq, m.ID)
		}
		// A Nats-Msg-Id of its own: the topic's duplicate window saw the
		// original's ID, and a second replay of this dead letter is dropped.
		replayID := m.ID + "/replay/" + m.Facts().BrokerID
		if err := t.publish(ctx, transport.StripDeadLetterHeaders(m, to), replayID); err != nil {
			return false, t.errf("replay %s: %w", dlq, err)
		}
		if err := t.deleteMsg(ctx, dlq, seq); err != nil {
			return false, t.errf("replay %s: message %q was replayed but is still in the DLQ: %w", dlq, m.ID, err)
		}
		n++
		return r.Limit <= 0 || n < r.Limit, nil
	})
	return n, err
}

// scanDLQ calls fn with each message of subject dlq, oldest first, until
// fn returns false or an error.
func (t *Transport) scanDLQ(ctx context.Context, dlq string, fn func(m *handler.Message, seq uint64) (bool, error)) error {
	if err := t.check(); err != nil {
		return err
	}
	if !validSubject(dlq, false) {
		return fmt.Errorf("%w: jetstream: DLQ %q is not a subject", transport.ErrInvalidOption, dlq)
	}
	// Publish adds the partition (and, with key_subject, the Key) to the
	// DLQ's subject, as to any topic's: read every one of them.
	filter := dlq
	if t.cfg.partitions > 1 {
		filter += ".*"
	}
	if t.cfg.keySubject {
		filter += ".>"
	}
	cctx, cancel := t.opCtx(ctx)
	name, err := t.js.StreamNameBySubject(cctx, filter)
	cancel()
	if errors.Is(err, njs.ErrStreamNotFound) {
		return t.errf("DLQ %s: no stream captures it: %w", dlq, transport.ErrNotFound)
	}
	if err != nil {
		return t.errf("DLQ %s: %w", dlq, err)
	}
	cctx, cancel = t.opCtx(ctx)
	st, err := t.js.Stream(cctx, name)
	cancel()
	if err != nil {
		return t.errf("DLQ %s: stream %s: %w", dlq, name, err)
	}
	// Stop at the last message stored when the scan began: a replayed
	// message that fails again is dead-lettered behind it.
	last := st.CachedInfo().State.LastSeq
	for seq := uint64(1); seq <= last; {
		cctx, cancel := t.opCtx(ctx)
		raw, err := st.GetMsg(cctx, seq, njs.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, njs.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return t.errf("DLQ %s: reading stream %s from %d: %w", dlq, name, seq, err)
		}
		if raw.Sequence > last {
			return nil
		}
		m := &handler.Message{}
		decode(m, raw.Subject, raw.Data, raw.Header, "")
		m.SetFacts(handler.Facts{
			Transport: Scheme, Partition: -1, Offset: int64(raw.Sequence),
			BrokerID: brokerID(name, raw.Sequence), PublishedAt: raw.Time,
		})
		more, err := fn(m, raw.Sequence)
		if err != nil || !more {
			return err
		}
		seq = raw.Sequence + 1
	}
	return nil
}

// deleteMsg removes sequence seq from the stream that captures dlq.
func (t *Transport) deleteMsg(ctx context.Context, dlq string, seq uint64) error {
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	name, err := t.js.StreamNameBySubject(ctx, dlq)
	if err != nil {
		return err
	}
	st, err := t.js.Stream(ctx, name)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}
