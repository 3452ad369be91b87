package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// stream is one subscription on its own client and session. Messages
// arrive on the client library's goroutine (arrive), wait in queue, and
// leave through Receive on the Router's; their PUBACKs leave through the
// connection's ackQueue (ack.go). The session claim and takeover live in
// session.go, gap detection in gap.go.
type stream struct {
	t        *Transport
	sub      transport.Subscription
	filter   string
	shared   bool
	clientID string
	dlq      string
	sem      transport.Semantics
	client   conn
	log      *slog.Logger

	epoch atomic.Uint64 // connection attempts so far

	qmu    sync.Mutex
	queue  []*delivery // arrived, not yet received
	qhead  int
	acks   *ackQueue // the current connection's ack order
	notify chan struct{}

	own       sessionClaim  // this stream's claim on its session (session.go)
	ownSeen   chan struct{} // closed when the own claim first comes back
	unwatched atomic.Bool   // the claim topic is not usable: no takeover detection
	takenOver atomic.Bool
	takeMu    sync.Mutex
	takeErr   error                 // why, set before takenOver
	subErr    atomic.Pointer[error] // the last resubscription's failure, or nil
	gaps      gapTracker            // Receive's goroutine only
	first     chan error            // the first subscription's outcome
	firstOnce sync.Once
	closed    chan struct{}
	closeOnce sync.Once
	closing   atomic.Bool
}

var _ transport.Stream = (*stream)(nil)

func newStream(t *Transport, sub transport.Subscription, p plan, id string) *stream {
	return &stream{
		t:        t,
		sub:      sub,
		filter:   p.filter,
		shared:   p.shared,
		clientID: id,
		dlq:      p.dlq,
		sem:      p.sem,
		notify:   make(chan struct{}, 1),
		closed:   make(chan struct{}),
		first:    make(chan error, 1),
		log:      t.cfg.logger.With("client_id", id, "filter", p.filter),
		own:      newClaim(id),
		ownSeen:  make(chan struct{}),
	}
}

// Semantics declares what the stream guarantees; see the package
// documentation.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// onConnect subscribes after every connection (the broker may have lost
// the session in a restart without persistence). The first outcome goes
// to Subscribe. A later failure is not retried here: Receive reports it and
// tries again when called, so that its caller owns the backoff.
func (s *stream) onConnect() {
	if s.takenOver.Load() {
		go s.client.disconnect(0)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.t.cfg.connectTimeout)
		defer cancel()
		err := s.subscribe(ctx)
		first := false
		s.firstOnce.Do(func() { first = true; s.first <- err })
		switch {
		case first:
		case err != nil:
			s.subErr.Store(&err)
			s.log.Warn("mqtt: resubscribe after reconnect failed; the next Receive tries again", "err", err)
			s.wake()
		default:
			s.log.Info("mqtt: resubscribed after reconnect")
		}
	}()
}

// subscribe subscribes the connection to the filter, bounded by ctx and
// the CallTimeout.
func (s *stream) subscribe(ctx context.Context) error {
	ctx, cancel := s.t.bound(ctx)
	defer cancel()
	refused, err := s.client.subscribe(ctx, []string{s.filter})
	switch {
	case err != nil:
		return err
	case refused[0] != nil:
		return fmt.Errorf("the broker refused the subscription to %s (is the filter, or $share, allowed for this client?): %w", s.filter, refused[0])
	}
	s.subErr.Store(nil)
	return nil
}

func (s *stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// arrive is the client library's message handler, called in arrival order
// from one goroutine. It must not block: it records the message's place in
// the ack order and queues it for Receive. Session claims (a "#" filter
// matches them) are acked and dropped.
func (s *stream) arrive(pm inbound) {
	d := &delivery{s: s, pm: pm, recv: time.Now()}
	ep := s.epoch.Load()
	control := strings.HasPrefix(pm.Topic(), sessionTopicPrefix)
	s.qmu.Lock()
	if s.acks == nil || s.acks.epoch != ep {
		s.acks = &ackQueue{epoch: ep, send: ackSender(s.client)} // a new connection: the old order is void
	}
	d.q = s.acks
	d.q.push(d)
	if !control {
		s.queue = append(s.queue, d)
	}
	s.qmu.Unlock()
	if control {
		d.settled.Store(true)
		d.q.ack(d)
		return
	}
	s.wake()
}

// Receive returns the next delivery in arrival order. It is called from one
// goroutine at a time. A malformed envelope is not returned: it is
// published to the stream's DLQ and acked; if that publish fails, Receive
// returns the error and tries the same message again on the next call.
// After the session was taken over, Receive returns an error wrapping
// [ErrTakenOver]; after a failed resubscription, the error, having tried
// once more.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	for {
		if s.takenOver.Load() {
			return nil, fmt.Errorf("mqtt: receive %s: %w", s.filter, s.takeErr)
		}
		if s.subErr.Load() != nil && s.client.up() {
			if err := s.subscribe(ctx); err != nil {
				return nil, fmt.Errorf("mqtt: receive %s: resubscribe: %w", s.filter, err)
			}
			s.log.Info("mqtt: resubscribed")
		}
		s.qmu.Lock()
		var d *delivery
		if s.qhead < len(s.queue) {
			d = s.queue[s.qhead]
		}
		s.qmu.Unlock()
		if d == nil {
			select {
			case <-s.notify:
				continue
			case <-s.closed:
				return nil, fmt.Errorf("mqtt: receive %s: %w", s.filter, transport.ErrClosed)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		select {
		case <-s.closed:
			return nil, fmt.Errorf("mqtt: receive %s: %w", s.filter, transport.ErrClosed)
		default:
		}
		ok, err := s.prepare(ctx, d)
		if err != nil {
			return nil, err
		}
		s.qmu.Lock()
		s.queue[s.qhead] = nil
		s.qhead++
		if s.qhead == len(s.queue) {
			s.queue, s.qhead = s.queue[:0], 0
		}
		s.qmu.Unlock()
		if ok {
			return d, nil
		}
	}
}

// prepare fills d's Message. It reports false for a malformed envelope,
// which it dead-letters and acks.
func (s *stream) prepare(ctx context.Context, d *delivery) (bool, error) {
	topic, payload := d.pm.Topic(), d.pm.Payload()
	m := &d.msg
	m.Topic = topic
	attempt := 1
	if d.pm.Duplicate() {
		attempt = 2 // at least: the broker sent it before, on an earlier connection
	}
	m.SetFacts(handler.Facts{
		Attempt:    attempt,
		Transport:  Scheme,
		Partition:  -1,
		Offset:     -1,
		BrokerID:   strconv.Itoa(int(d.pm.MessageID())),
		ReceivedAt: d.recv,
	})
	switch s.t.cfg.format {
	case Raw:
		m.Payload = payload
		m.ID = s.t.cfg.idFunc(topic, payload)
		m.Key = s.t.cfg.keyFunc(topic, payload)
		return true, nil
	case Properties:
		pub, seq := decodeProps(d.pm.Props(), topic, payload, m, s.t.cfg.idFunc, s.t.cfg.keyFunc)
		if pub != "" && seq != 0 && !s.shared {
			seeGap(s, pub, topic, seq, d.pm.Retained())
		}
		return true, nil
	}
	pub, seq, err := decodeEnvelope(payload, m)
	if err != nil {
		if derr := s.deadLetter(ctx, d, err); derr != nil {
			return false, derr
		}
		d.settled.Store(true)
		d.q.ack(d)
		return false, nil
	}
	if len(pub) > 0 && seq != 0 && !s.shared {
		seeGap(s, pub, topic, seq, d.pm.Retained())
	}
	return true, nil
}

// deadLetter publishes a malformed message, unchanged, to the stream's DLQ
// with the dead-letter record.
func (s *stream) deadLetter(ctx context.Context, d *delivery, cause error) error {
	topic, payload := d.pm.Topic(), d.pm.Payload()
	m := &handler.Message{ID: ContentHash(topic, payload), Key: topic, Topic: topic, Payload: payload}
	f := d.msg.Facts()
	f.Subscription, f.Group = s.clientID, s.sub.Group // the stream knows its session, not the Router's name
	m.SetFacts(f)
	dl := transport.NewDeadLetter(m, cause, time.Now())
	if err := s.t.publish(ctx, dl.Message(m, s.dlq), false); err != nil {
		return fmt.Errorf("mqtt: dead-letter malformed envelope from %s to %s: %w", topic, s.dlq, err)
	}
	s.log.Warn("mqtt: malformed envelope dead-lettered", "topic", topic, "dlq", s.dlq, "err", cause)
	return nil
}

// Close disconnects the stream's client. Acks already given are sent; the
// unsettled deliveries stay unacked in the session, and the broker
// redelivers them when a stream with the same client ID connects again.
// ctx bounds the wait (at most 250ms). Closing again does nothing and
// returns nil.
func (s *stream) Close(ctx context.Context) error {
	if s.closing.Swap(true) {
		return nil
	}
	s.shut(quiesce(ctx))
	return nil
}

// shut closes the stream and releases its client ID.
func (s *stream) shut(q time.Duration) {
	s.closing.Store(true)
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.client != nil {
			s.client.disconnect(q)
		}
		s.t.mu.Lock()
		delete(s.t.streams, s)
		s.t.mu.Unlock()
		s.t.unclaim(s, max(q, 100*time.Millisecond))
		s.t.release(s.clientID)
	})
}

// errClosedStream is the cause of a settle after Close.
var errClosedStream = errors.New("the stream is closed; the message stays in the session and is redelivered")
