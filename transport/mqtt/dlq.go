package mqtt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// headerPass marks a dead letter that a ReplayDLQ run put back at the end
// of the DLQ; meeting it again ends the run. ListDLQ and ReplayDLQ remove it.
const headerPass = "ferry-mqtt-dlq-pass"

// dlqQuiet is how long a DLQ operation waits for the next dead letter
// before it takes the DLQ to be exhausted.
const dlqQuiet = 500 * time.Millisecond

// DLQTopic returns "ferry/dlq/<name>": the DLQ that [Transport.DLQName]
// gives a subscription whose Group is name (the Router's default Group is
// the subscription's name) with the default [DLQPrefix].
func DLQTopic(name string) string { return DefaultDLQPrefix + name }

// dlqState serialises the operations on one DLQ in this process.
type dlqState struct {
	mu      sync.Mutex
	ensured bool
}

// isDLQ reports whether publishing to topic is dead-lettering.
func (t *Transport) isDLQ(topic string) bool {
	return strings.HasPrefix(topic, t.cfg.dlqPrefix) || strings.HasSuffix(topic, ".dlq")
}

// dlqClientID is the client ID of the persistent session that keeps a DLQ.
func dlqClientID(topic string) string {
	sum := sha256.Sum256([]byte(topic))
	return "ferry-dlq-" + hex.EncodeToString(sum[:8])
}

func (t *Transport) dlqState(topic string) *dlqState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.dlqs[topic]
	if st == nil {
		st = &dlqState{}
		t.dlqs[topic] = st
	}
	return st
}

// ensureDLQ makes sure the persistent session that keeps topic's dead
// letters exists, so that the broker queues them when no one listens.
func (t *Transport) ensureDLQ(ctx context.Context, topic string) error {
	st := t.dlqState(topic)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ensured {
		return nil
	}
	s, err := t.openDLQ(ctx, topic, nil)
	if err != nil {
		return err
	}
	s.close(ctx)
	st.ensured = true
	return nil
}

// dlqSession is an open connection on a DLQ's persistent session.
type dlqSession struct {
	t     *Transport
	id    string
	c     conn
	msgs  chan inbound
	done  chan struct{}
	once  sync.Once
	topic string
}

// openDLQ connects to topic's DLQ session and subscribes. If msgs is not
// nil, the dead letters the broker sends arrive on it, unacked.
func (t *Transport) openDLQ(ctx context.Context, topic string, msgs chan inbound) (*dlqSession, error) {
	if err := validTopic(topic); err != nil {
		return nil, fmt.Errorf("mqtt: dlq: %w: %w", transport.ErrInvalidOption, err)
	}
	id := dlqClientID(topic)
	if !t.hold(id) {
		return nil, fmt.Errorf("mqtt: dlq %s: its session %s is in use by this Transport", topic, id)
	}
	s := &dlqSession{t: t, id: id, msgs: msgs, done: make(chan struct{}), topic: topic}
	s.c = t.dial(connSpec{
		clientID:      id,
		manualAck:     true,
		sessionExpiry: t.sessionExpiry(),
		onMessage: func(pm inbound) {
			if s.msgs == nil {
				return // not acked: stays in the session
			}
			select {
			case s.msgs <- pm:
			case <-s.done:
			}
		},
	})
	if err := s.c.connect(ctx); err != nil {
		t.release(id)
		return nil, fmt.Errorf("mqtt: dlq %s: %w", topic, err)
	}
	sctx, cancel := t.bound(ctx)
	refused, err := s.c.subscribe(sctx, []string{topic})
	cancel()
	if err == nil && refused[0] != nil {
		err = fmt.Errorf("the broker refused the subscription: %w", refused[0])
	}
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("mqtt: dlq %s: subscribe: %w", topic, err)
	}
	return s, nil
}

func (s *dlqSession) close(ctx context.Context) {
	s.once.Do(func() {
		close(s.done)
		s.c.disconnect(quiesce(ctx))
		s.t.release(s.id)
	})
}

// next waits for the next dead letter, at most dlqQuiet.
func (s *dlqSession) next(ctx context.Context) (inbound, error) {
	timer := time.NewTimer(dlqQuiet)
	defer timer.Stop()
	select {
	case pm := <-s.msgs:
		return pm, nil
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// decodeDeadLetter turns a DLQ message into a Message: as written by
// dead-lettering (properties, or an envelope), or (written by another
// client) raw bytes with the properties it has.
func (t *Transport) decodeDeadLetter(dlq string, pm inbound) *handler.Message {
	m := &handler.Message{Topic: dlq}
	if t.headerFormat() == Properties {
		decodeProps(pm.Props(), pm.Topic(), pm.Payload(), m, ContentHash, TopicKey)
	} else if _, _, err := decodeEnvelope(pm.Payload(), m); err != nil {
		m.ID, m.Key, m.Payload, m.Headers = ContentHash(pm.Topic(), pm.Payload()), pm.Topic(), pm.Payload(), nil
	}
	m.SetFacts(handler.Facts{Attempt: 1, Transport: Scheme, Partition: -1, Offset: -1, ReceivedAt: time.Now()})
	return m
}

// ListDLQ returns up to limit dead letters of the DLQ topic dlq, oldest
// first, without removing them: it reads them from the DLQ's persistent
// session and disconnects without acking, so the broker keeps them. The
// read stops at limit or when none arrives for 500ms.
//
// The broker sends a client at most its in-flight window of unacked
// messages (Mosquitto max_inflight_messages, 20 by default), so ListDLQ
// sees at most that many; ReplayDLQ reads the whole DLQ. Operations on one
// DLQ are serialised in this process; do not run them from two processes
// at once (they share the DLQ's client ID).
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	if t.closed.Load() {
		return nil, fmt.Errorf("mqtt: list dlq %s: %w", dlq, transport.ErrClosed)
	}
	st := t.dlqState(dlq)
	st.mu.Lock()
	defer st.mu.Unlock()
	msgs := make(chan inbound, 64)
	s, err := t.openDLQ(ctx, dlq, msgs)
	if err != nil {
		return nil, err
	}
	defer s.close(context.WithoutCancel(ctx))
	st.ensured = true
	var out []*handler.Message
	for limit <= 0 || len(out) < limit {
		pm, err := s.next(ctx)
		if err != nil {
			return out, fmt.Errorf("mqtt: list dlq %s: %w", dlq, err)
		}
		if pm == nil {
			break
		}
		m := t.decodeDeadLetter(dlq, pm)
		delete(m.Headers, headerPass)
		out = append(out, m)
	}
	return out, nil
}

// ReplayDLQ republishes the dead letters of dlq that r selects, to r.To or
// each one's original topic, in DLQ order, with their ID, Key, Payload and
// original headers (in the Transport's [PayloadFormat]: with [Raw] only
// the payload travels, and the consumer's [IDFrom] recomputes the same
// ID). Each is acked, so removed from the DLQ, only after its publish is
// confirmed. A dead letter that r does not select is put back at the end
// of the DLQ (published again, then acked), so one run reads the DLQ once
// through and keeps the order of what stays. The run stops at r.Limit,
// when it meets what it put back, or when none arrives for 500ms.
//
// A failure or crash part-way leaves every dead letter in the DLQ at least
// once (one may be both replayed and still there, or there twice):
// replaying again is safe because consumers dedupe on the ID.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	if t.closed.Load() {
		return 0, fmt.Errorf("mqtt: replay dlq %s: %w", dlq, transport.ErrClosed)
	}
	st := t.dlqState(dlq)
	st.mu.Lock()
	defer st.mu.Unlock()
	msgs := make(chan inbound, 64)
	s, err := t.openDLQ(ctx, dlq, msgs)
	if err != nil {
		return 0, err
	}
	defer s.close(context.WithoutCancel(ctx))
	st.ensured = true
	pass := randomSuffix()
	n := 0
	for r.Limit <= 0 || n < r.Limit {
		pm, err := s.next(ctx)
		if err != nil {
			return n, fmt.Errorf("mqtt: replay dlq %s: %w", dlq, err)
		}
		if pm == nil {
			break
		}
		m := t.decodeDeadLetter(dlq, pm)
		if m.Headers[headerPass] == pass {
			break // back to where this run started; leave it unacked
		}
		delete(m.Headers, headerPass)
		if r.Selects(m) {
			dest := r.Destination(m)
			if dest == "" {
				return n, fmt.Errorf("%w: mqtt: replay dlq %s: message %s has no original topic; set Replay.To",
					transport.ErrInvalidOption, dlq, m.ID)
			}
			if err := t.publish(ctx, transport.StripDeadLetterHeaders(m, dest), false); err != nil {
				return n, fmt.Errorf("mqtt: replay dlq %s: %w", dlq, err)
			}
			pm.Ack()
			n++
			continue
		}
		back := m.Clone()
		if back.Headers == nil {
			back.Headers = make(map[string]string, 1)
		}
		back.Headers[headerPass] = pass
		if err := t.publishAs(ctx, back, false, false); err != nil {
			return n, fmt.Errorf("mqtt: replay dlq %s: put back %s: %w", dlq, m.ID, err)
		}
		pm.Ack()
	}
	return n, nil
}

// RemoveDLQ deletes the persistent session that keeps the DLQ topic dlq,
// and with it every dead letter queued there: a purge. Dead letters
// published afterwards are kept again (the next publish recreates the
// session).
func (t *Transport) RemoveDLQ(ctx context.Context, dlq string) error {
	st := t.dlqState(dlq)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := t.removeSession(ctx, dlqClientID(dlq)); err != nil {
		return fmt.Errorf("mqtt: remove dlq %s: %w", dlq, err)
	}
	st.ensured = false
	return nil
}
