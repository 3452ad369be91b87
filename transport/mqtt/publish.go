package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// mqttMaxPacket is MQTT's largest packet body, in bytes.
const mqttMaxPacket = 268435455

// Publish publishes m to the topic m.Topic at the Transport's [QoS] (1
// by default) and returns once the broker has acknowledged it (PUBACK;
// PUBCOMP at QoS 2). With [Properties] (the MQTT 5 default) the payload
// travels as it is and ID, Key and Headers as user properties; in the
// [Envelope] (the MQTT 3.1.1 default) all of them travel in a JSON
// document; both carry this Transport's next sequence number for the
// topic. With [Raw] only the Payload travels. Publishing to a DLQ topic
// (see [DLQPrefix]) always carries the headers (properties, or the
// envelope on MQTT 3.1.1) and first makes sure the DLQ's persistent
// session exists.
//
// A Message its consumer would not get back byte for byte is refused
// before anything is sent, with an error wrapping [ErrInvalidMessage]
// that names the field: an empty ID; with Properties, text an MQTT broker
// refuses in a property (invalid UTF-8, NUL, control characters,
// non-characters), a reserved header name, or a property header
// ([HeaderMessageExpiry] and the others) with a value its property cannot
// carry; in the envelope, text that is not valid UTF-8; with Raw,
// headers, or an ID or Key other than what [IDFrom] and [KeyFrom] compute
// (an empty ID or Key is fine: the consumer computes them). A Payload
// over [MaxPayload], or a message over the broker's Maximum Packet Size,
// is refused with [transport.ErrTooLarge].
//
// While the connection is down, Publish waits for it to come back,
// bounded by ctx and the [CallTimeout]: if they end first, nothing was
// sent and the error wraps [ErrNotConnected] and the context's error.
// Once the message is handed to the connection, an end before the
// acknowledgement gives an error wrapping [transport.ErrUnknownOutcome]:
// the client may still send it after a reconnect. A broker that refuses
// the message (an MQTT 5 reason code: [ErrNotAuthorized],
// [ErrQuotaExceeded], …) gives an error wrapping a [*ReasonError]: it was
// not written. Publish may be called concurrently; publishes to one
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

// bound returns ctx with the CallTimeout as a deadline, unless it ends
// sooner.
func (t *Transport) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= t.cfg.callTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, t.cfg.callTimeout)
}

func (t *Transport) publish(ctx context.Context, m *handler.Message, retain bool) error {
	return t.publishAs(ctx, m, retain, true)
}

// publishAs is publish; ensure says whether to make sure a DLQ topic's
// session exists first (ReplayDLQ, which holds it open, does not).
func (t *Transport) publishAs(ctx context.Context, m *handler.Message, retain, ensure bool) error {
	p, err := t.prepare(ctx, m, retain, ensure)
	if err != nil {
		return err
	}
	tok, sendErr := p.send(ctx)
	return t.await(ctx, m.Topic, tok, sendErr)
}

// prepared is a message checked and encoded for sending, but for its
// sequence number.
type prepared struct {
	t      *Transport
	out    outbound
	env    []byte // the envelope up to the sequence number, or nil
	seqd   bool   // takes a sequence number
	format Format
}

// prepare checks and encodes m as Publish says, and makes sure a DLQ's
// session exists if ensure is set. The prepared message is a value, kept
// on the caller's stack.
func (t *Transport) prepare(ctx context.Context, m *handler.Message, retain, ensure bool) (prepared, error) {
	if t.closed.Load() {
		return prepared{}, fmt.Errorf("mqtt: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	if err := validTopic(m.Topic); err != nil {
		return prepared{}, fmt.Errorf("mqtt: publish: %w: %w", ErrInvalidMessage, err)
	}
	if len(m.Payload) > t.cfg.maxPayload {
		return prepared{}, fmt.Errorf("mqtt: publish %s: %w: %d bytes, the limit is %d (MaxPayload)", m.Topic, transport.ErrTooLarge, len(m.Payload), t.cfg.maxPayload)
	}
	dlq := t.isDLQ(m.Topic)
	p := prepared{t: t, out: outbound{topic: m.Topic, retain: retain}, format: t.cfg.format}
	if dlq && p.format == Raw {
		p.format = t.headerFormat()
	}
	switch p.format {
	case Raw:
		if err := t.checkRaw(m); err != nil {
			return prepared{}, fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
		p.out.payload = m.Payload
		return p, t.checkSize(&p, 0)
	case Properties:
		if err := checkProps(m); err != nil {
			return prepared{}, fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
		p.out.payload = m.Payload
		p.out.props = encodeProps(m, dlq)
	default:
		if err := checkEnvelope(m); err != nil {
			return prepared{}, fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
		p.env = newEnvelope(m, t.pubID)
	}
	p.seqd = true
	if err := t.checkSize(&p, propsSize(p.out.props)); err != nil {
		return prepared{}, err
	}
	if dlq && ensure {
		ctx, cancel := t.bound(ctx)
		defer cancel()
		if err := t.ensureDLQ(ctx, m.Topic); err != nil {
			return prepared{}, fmt.Errorf("mqtt: publish %s: %w", m.Topic, err)
		}
	}
	return p, nil
}

// headerFormat is the format that carries headers on this protocol: what
// dead letters travel in.
func (t *Transport) headerFormat() Format {
	if t.cfg.version == MQTT311 || t.cfg.format == Envelope {
		return Envelope
	}
	return Properties
}

// checkSize refuses a message over MQTT's packet limit, or over the
// broker's Maximum Packet Size when it announced one.
func (t *Transport) checkSize(p *prepared, props int) error {
	n := len(p.out.topic) + 32 + props + len(p.out.payload) + len(p.env)
	limit := mqttMaxPacket
	if mp := t.pub.maxPacket(); mp > 0 {
		limit = mp
	}
	if n > limit {
		return fmt.Errorf("mqtt: publish %s: %w: the message is about %d bytes, over the broker's packet limit of %d", p.out.topic, transport.ErrTooLarge, n, limit)
	}
	return nil
}

// propsSize estimates the encoded size of p.
func propsSize(p *paho5.PublishProperties) int {
	if p == nil {
		return 0
	}
	n := 24 + len(p.ContentType) + len(p.ResponseTopic) + len(p.CorrelationData)
	for _, u := range p.User {
		n += 5 + len(u.Key) + len(u.Value)
	}
	return n
}

// send waits for the publishing connection (bounded by ctx and the
// CallTimeout) and hands the message to it, with the topic's next
// sequence number if it takes one.
func (p *prepared) send(ctx context.Context) (token, error) {
	t := p.t
	if err := t.wait(ctx, p.out.topic); err != nil {
		return nil, err
	}
	if !p.seqd {
		return t.pub.publish(ctx, p.out)
	}
	ts, ok := t.seqs.Load(p.out.topic)
	if !ok {
		ts, _ = t.seqs.LoadOrStore(p.out.topic, new(topicSeq))
	}
	seq := ts.(*topicSeq)
	seq.mu.Lock()
	if p.env != nil {
		p.out.payload = finishEnvelope(p.env, seq.last+1)
	} else {
		finishProps(p.out.props, t.pubID, seq.last+1)
	}
	tok, err := t.pub.publish(ctx, p.out)
	if err == nil {
		seq.last++ // the number is used only if the message left
	}
	seq.mu.Unlock()
	return tok, err
}

// checkRaw reports why m cannot travel raw byte for byte: only the payload
// travels, and the consumer computes ID and Key with the configured
// functions.
func (t *Transport) checkRaw(m *handler.Message) error {
	switch {
	case len(m.Headers) > 0:
		return fmt.Errorf("%w: format=raw carries no headers (%d given); use the default format", ErrInvalidMessage, len(m.Headers))
	case m.ID != "" && m.ID != t.cfg.idFunc(m.Topic, m.Payload):
		return fmt.Errorf("%w: format=raw does not carry Message.ID, and the consumer's IDFrom computes another one from the topic and payload; leave ID empty or use the default format", ErrInvalidMessage)
	case m.Key != "" && m.Key != t.cfg.keyFunc(m.Topic, m.Payload):
		return fmt.Errorf("%w: format=raw does not carry Message.Key, and the consumer's KeyFrom computes another one from the topic and payload; leave Key empty or use the default format", ErrInvalidMessage)
	}
	return nil
}

// topicSeq numbers one topic's messages from this Transport. mu is held
// from taking a number to handing the message to the connection, so that
// publishes of one topic leave in number order and a consumer can tell a
// gap (a message the broker dropped) from a reordering.
type topicSeq struct {
	mu   sync.Mutex
	last uint64
}

// send publishes payload as it is, on topic, waiting as Publish says.
func (t *Transport) send(ctx context.Context, topic string, payload []byte, retain bool) error {
	p := prepared{t: t, out: outbound{topic: topic, payload: payload, retain: retain}}
	tok, err := p.send(ctx)
	return t.await(ctx, topic, tok, err)
}

// wait waits for the publishing connection, bounded by ctx and the
// CallTimeout.
func (t *Transport) wait(ctx context.Context, topic string) error {
	if err := t.conn.wait(ctx, t.cfg.callTimeout); err != nil {
		if errors.Is(err, transport.ErrClosed) {
			return fmt.Errorf("mqtt: publish %s: %w", topic, transport.ErrClosed)
		}
		return fmt.Errorf("mqtt: publish %s: %w (nothing was sent): %w", topic, ErrNotConnected, err)
	}
	return nil
}

// await waits for the acknowledgement of a publish handed to the
// connection; sendErr is send's error.
func (t *Transport) await(ctx context.Context, topic string, tok token, sendErr error) error {
	switch {
	case sendErr == nil:
	case errors.Is(sendErr, transport.ErrClosed), errors.Is(sendErr, ErrNotConnected):
		return sendErr
	case errors.Is(sendErr, errNotSent):
		return fmt.Errorf("mqtt: publish %s: %w: %w", topic, ErrNotConnected, sendErr)
	default:
		return fmt.Errorf("mqtt: publish %s: %w", topic, sendErr)
	}
	select {
	case <-tok.Done():
		return tokErr(topic, tok)
	default:
	}
	var timeout <-chan time.Time
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > t.cfg.callTimeout {
		timer := t.timer(t.cfg.callTimeout)
		defer t.timers.Put(timer)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-tok.Done():
		return tokErr(topic, tok)
	case <-ctx.Done():
		return fmt.Errorf("mqtt: publish %s: no acknowledgement: %w: %w", topic, transport.ErrUnknownOutcome, ctx.Err())
	case <-timeout:
		return fmt.Errorf("mqtt: publish %s: no acknowledgement within the call timeout %v: %w: %w", topic, t.cfg.callTimeout, transport.ErrUnknownOutcome, context.DeadlineExceeded)
	}
}

// timer returns a timer that fires after d, reusing one a publish has
// finished with (t.timers): a publish waits for its acknowledgement with a
// timer, and the reuse saves allocating one per publish. A timer
// put back must be stopped first; since Go 1.23 a stopped timer's channel
// delivers nothing stale after Reset.
func (t *Transport) timer(d time.Duration) *time.Timer {
	if tm, ok := t.timers.Get().(*time.Timer); ok {
		tm.Reset(d)
		return tm
	}
	return time.NewTimer(d)
}

// tokErr is the result of a completed publish token.
func tokErr(topic string, tok token) error {
	if err := tok.Error(); err != nil {
		return fmt.Errorf("mqtt: publish %s: %w", topic, err)
	}
	return nil
}

// validTopic checks a topic name for publishing: not empty, no wildcards,
// and a string MQTT brokers accept (validString).
func validTopic(topic string) error {
	if topic == "" {
		return errors.New("empty topic")
	}
	if err := validString(topic); err != nil {
		return fmt.Errorf("the topic name %w", err)
	}
	if strings.ContainsAny(topic, "+#") {
		return fmt.Errorf("topic %q: wildcards are not allowed in a topic name", topic)
	}
	return nil
}

// connState tracks whether the publishing connection is up, so that
// publishes can wait for it.
type connState struct {
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

// wait returns nil once connected, or ctx's error, or
// context.DeadlineExceeded after timeout, or ErrClosed.
func (c *connState) wait(ctx context.Context, timeout time.Duration) error {
	ready := *c.ready.Load()
	select {
	case <-ready:
		return nil
	default:
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case <-c.closed:
		return transport.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("the call timeout %v passed: %w", timeout, context.DeadlineExceeded)
	}
}
