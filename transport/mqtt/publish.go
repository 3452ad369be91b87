package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// mqttMaxPacket is MQTT's largest packet body, in bytes.
const mqttMaxPacket = 268435455

// Publish publishes m to the topic m.Topic at QoS 1 and returns once the
// broker has sent its PUBACK. In the [Envelope] (the default) ID, Key,
// Headers and Payload travel, with this Transport's next sequence number
// for the topic; with [Raw] only the Payload does. Publishing to a DLQ
// topic (see [DLQPrefix]) always uses the envelope and first makes sure
// the DLQ's persistent session exists.
//
// A Message its consumer would not get back byte for byte is refused
// before anything is sent, with an error wrapping [ErrInvalidMessage]: in
// the envelope, an empty ID, or an ID, Key or header that is not valid
// UTF-8; with Raw, headers, or an ID or Key other than what [IDFrom] and
// [KeyFrom] compute (an empty ID or Key is fine: the consumer computes
// them). A Payload over [MaxPayload] is refused with
// [transport.ErrTooLarge].
//
// While the connection is down, Publish waits for it to come back, bounded
// by ctx: if ctx ends first, nothing was sent and the error wraps
// [ErrNotConnected] and ctx.Err(). Once the message is handed to the
// connection, a ctx that ends before the PUBACK gives an error wrapping
// [transport.ErrUnknownOutcome] and ctx.Err(): the client may still send it
// after a reconnect. Publish may be called concurrently; publishes to one
// topic leave in the order their sequence numbers were given.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	return t.publish(ctx, m, t.cfg.retain)
}

// PublishRetained is Publish with the MQTT retained flag set: the broker
// keeps m as the topic's last known value and hands it to every new
// subscriber. Publishing an empty payload retained with [Raw] clears the
// topic's retained message.
func (t *Transport) PublishRetained(ctx context.Context, m *handler.Message) error {
	return t.publish(ctx, m, true)
}

func (t *Transport) publish(ctx context.Context, m *handler.Message, retain bool) error {
	if t.closed.Load() {
		return fmt.Errorf("mqtt: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	if err := validTopic(m.Topic); err != nil {
		return fmt.Errorf("mqtt: publish: %w: %w", ErrInvalidMessage, err)
	}
	if len(m.Payload) > t.cfg.maxPayload {
		return fmt.Errorf("mqtt: publish %s: %w: %d bytes, the limit is %d (MaxPayload)", m.Topic, transport.ErrTooLarge, len(m.Payload), t.cfg.maxPayload)
	}
	dlq := t.isDLQ(m.Topic)
	if !dlq && t.cfg.format == Raw {
		if err := t.checkRaw(m); err != nil {
			return fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
		return t.send(ctx, m.Topic, m.Payload, retain)
	}
	if err := checkEnvelope(m); err != nil {
		return fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
	}
	if dlq {
		if err := t.ensureDLQ(ctx, m.Topic); err != nil {
			return fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
	}
	return t.sendEnvelope(ctx, m, retain)
}

// checkRaw reports why m cannot travel raw byte for byte: only the payload
// travels, and the consumer computes ID and Key with the configured
// functions.
func (t *Transport) checkRaw(m *handler.Message) error {
	switch {
	case len(m.Headers) > 0:
		return fmt.Errorf("%w: format=raw carries no headers (%d given); use the envelope (the default)", ErrInvalidMessage, len(m.Headers))
	case m.ID != "" && m.ID != t.cfg.idFunc(m.Topic, m.Payload):
		return fmt.Errorf("%w: format=raw does not carry Message.ID, and the consumer's IDFrom computes another one from the topic and payload; leave ID empty or use the envelope (the default)", ErrInvalidMessage)
	case m.Key != "" && m.Key != t.cfg.keyFunc(m.Topic, m.Payload):
		return fmt.Errorf("%w: format=raw does not carry Message.Key, and the consumer's KeyFrom computes another one from the topic and payload; leave Key empty or use the envelope (the default)", ErrInvalidMessage)
	}
	return nil
}

// topicSeq numbers one topic's envelopes from this Transport. mu is held
// from taking a number to handing the message to the connection, so that
// publishes of one topic leave in number order and a consumer can tell a
// gap (a message the broker dropped) from a reordering.
type topicSeq struct {
	mu   sync.Mutex
	last uint64
}

// sendEnvelope publishes m's envelope with the topic's next sequence
// number, waiting as Publish says.
func (t *Transport) sendEnvelope(ctx context.Context, m *handler.Message, retain bool) error {
	buf := appendEnvelope(make([]byte, 0, envelopeSize(m, t.pubID)+20), m, t.pubID)
	if len(buf) > mqttMaxPacket-len(m.Topic)-24 {
		return fmt.Errorf("mqtt: publish %s: %w: the envelope is %d bytes, over MQTT's packet limit", m.Topic, transport.ErrTooLarge, len(buf))
	}
	if err := t.wait(ctx, m.Topic); err != nil {
		return err
	}
	ts, ok := t.seqs.Load(m.Topic)
	if !ok {
		ts, _ = t.seqs.LoadOrStore(m.Topic, new(topicSeq))
	}
	seq := ts.(*topicSeq)
	seq.mu.Lock()
	attempt := t.conn.attempts.Load()
	tok, err := t.pub.publish(m.Topic, finishEnvelope(buf, seq.last+1), retain)
	if err == nil {
		seq.last++ // the number is used only if the message left
	}
	seq.mu.Unlock()
	return t.await(ctx, m.Topic, tok, attempt, err)
}

// send publishes payload as it is, waiting as Publish says.
func (t *Transport) send(ctx context.Context, topic string, payload []byte, retain bool) error {
	if err := t.wait(ctx, topic); err != nil {
		return err
	}
	attempt := t.conn.attempts.Load()
	tok, err := t.pub.publish(topic, payload, retain)
	return t.await(ctx, topic, tok, attempt, err)
}

// wait waits for the publishing connection, bounded by ctx.
func (t *Transport) wait(ctx context.Context, topic string) error {
	if err := t.conn.wait(ctx); err != nil {
		if errors.Is(err, transport.ErrClosed) {
			return fmt.Errorf("mqtt: publish %s: %w", topic, transport.ErrClosed)
		}
		return fmt.Errorf("mqtt: publish %s: %w (nothing was sent): %w", topic, ErrNotConnected, err)
	}
	return nil
}

// await waits for the PUBACK of a publish handed to the connection during
// connection attempt number attempt; sendErr is conn.publish's error.
func (t *Transport) await(ctx context.Context, topic string, tok token, attempt uint64, sendErr error) error {
	if sendErr != nil {
		return fmt.Errorf("mqtt: publish %s: %w: %w", topic, ErrNotConnected, sendErr)
	}
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("mqtt: publish %s: %w: %w", topic, transport.ErrUnknownOutcome, err)
		}
		if t.conn.attempts.Load() != attempt {
			// The connection was replaced while the publish was in flight.
			// paho then resends it and completes the original token without
			// waiting for the new PUBACK, so the token proves nothing.
			return fmt.Errorf("mqtt: publish %s: %w: the connection was lost and re-established before the PUBACK", topic, transport.ErrUnknownOutcome)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mqtt: publish %s: no PUBACK: %w: %w", topic, transport.ErrUnknownOutcome, ctx.Err())
	}
}

// validTopic checks a topic name for publishing: not empty, valid UTF-8,
// no wildcards, no NUL, at most 65535 bytes (MQTT 3.1.1 section 4.7).
func validTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("empty topic")
	case len(topic) > 65535:
		return errors.New("topic longer than 65535 bytes")
	case !utf8.ValidString(topic):
		return errors.New("topic is not valid UTF-8")
	case strings.ContainsAny(topic, "+#\x00"):
		return fmt.Errorf("topic %q: wildcards and NUL are not allowed in a topic name", topic)
	}
	return nil
}

// connState tracks whether the publishing connection is up, so that
// publishes can wait for it.
type connState struct {
	attempts atomic.Uint64 // connection attempts so far

	// ready is closed while connected; read without the lock by every
	// publish, replaced under mu when the connection goes down.
	ready  atomic.Pointer[chan struct{}]
	mu     sync.Mutex
	closed chan struct{} // closed by close
	isUp   bool
}

func newConnState() *connState {
	c := &connState{closed: make(chan struct{})}
	ready := make(chan struct{})
	c.ready.Store(&ready)
	return c
}

func (c *connState) up() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.isUp {
		c.isUp = true
		close(*c.ready.Load())
	}
}

func (c *connState) down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isUp {
		c.isUp = false
		ready := make(chan struct{})
		c.ready.Store(&ready)
	}
}

func (c *connState) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
}

// wait returns nil once connected, or ctx's error, or ErrClosed.
func (c *connState) wait(ctx context.Context) error {
	ready := *c.ready.Load()
	select {
	case <-ready:
		return nil
	default:
	}
	select {
	case <-ready:
		return nil
	case <-c.closed:
		return transport.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}
