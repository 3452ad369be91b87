package mqtt

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Subscription.Options keys this transport reads.
const (
	// OptionDLQ names the DLQ topic of a subscription: where malformed
	// envelopes go. The default is the DLQ prefix followed by the client ID.
	OptionDLQ = "dlq"

	// OptionShare, "true" (the default) or "false", says whether a
	// Subscription with a Group is a shared subscription. With "false" the
	// Group only names the session (the client ID), and the subscription is
	// a plain one: use it for a group with a single consumer that must not
	// lose messages across a broker restart, because Mosquitto 2.0 does not
	// persist shared subscriptions (see the package documentation).
	OptionShare = "share"
)

// Subscribe opens sub on a connection of its own with a persistent session
// (clean session false) and subscribes to sub.Topic at QoS 1, returning
// once the broker has acknowledged the subscription.
//
//   - Topic is a topic filter: wildcards + and # are allowed.
//   - Group, when set, makes the subscription shared, $share/<Group>/<Topic>
//     (Mosquitto 2, and any MQTT 5 broker): the members of a group split the
//     messages, each going to one of them. Empty means a plain subscription:
//     every subscription gets every message.
//   - Consumer is the MQTT client ID, which names the persistent session.
//     Empty means one derived from Group and Topic ("ferry-<group>-<hash>"),
//     stable across restarts, with "-2", "-3" … added when the same process
//     opens the same subscription again while the first is open. Two
//     processes that run one subscription must set Consumer to distinct
//     stable names (a host name): two live connections with one client ID
//     take each other over at the broker.
//   - StartAtOldest and MaxInFlight are ignored: MQTT keeps no history (a
//     new subscription gets only the topic's retained message), and the
//     broker sets the in-flight window (Mosquitto max_inflight_messages,
//     20 by default).
//   - Options: "dlq", the DLQ topic for malformed envelopes (default: the
//     DLQ prefix and the client ID); "share=false" ([OptionShare]) to make
//     a Group's subscription a plain one. Other keys are an error.
//
// The Router sets Group to the subscription's name when it is empty, so a
// Router subscription is a shared one unless share=false.
//
// The session keeps the subscription and queues messages while the stream
// is closed or the process is down (see the package documentation for
// Mosquitto's max_queued_messages limit). When the connection drops, the
// stream reconnects with backoff and subscribes again; the broker then
// redelivers every message not acked on the old connection. ctx bounds the
// opening only.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, fmt.Errorf("mqtt: subscribe %s: %w", sub.Topic, transport.ErrClosed)
	}
	if err := transport.UnknownKeys(Scheme, sub.Options, OptionDLQ, OptionShare); err != nil {
		return nil, err
	}
	filter, err := subscriptionFilter(sub)
	if err != nil {
		return nil, fmt.Errorf("mqtt: subscribe: %w", err)
	}
	id, err := pickClientID(sub)
	if err != nil {
		return nil, fmt.Errorf("mqtt: subscribe %s: %w", sub.Topic, err)
	}
	s := &stream{
		t:        t,
		sub:      sub,
		filter:   filter,
		clientID: id,
		dlq:      sub.Options[OptionDLQ],
		notify:   make(chan struct{}, 1),
		closed:   make(chan struct{}),
		first:    make(chan error, 1),
		log:      t.cfg.logger.With("client_id", id, "filter", filter),
	}
	if s.dlq == "" {
		s.dlq = t.cfg.dlqPrefix + id
	}
	if err := validTopic(s.dlq); err != nil {
		releaseClientID(id)
		return nil, fmt.Errorf("mqtt: subscribe %s: dlq: %w", sub.Topic, err)
	}
	s.sem = transport.Semantics{
		Transport:       Scheme,
		Ordering:        transport.OrderPerTopic,
		Ack:             transport.AckInOrder,
		Redelivery:      transport.RedeliverOnReconnect,
		NackDelay:       false,
		Attempts:        false,
		Extend:          false,
		NativeDLQ:       false,
		FanOut:          true, // each shared-subscription group (or plain session) gets every message
		Replay:          false,
		Headers:         t.cfg.format == Envelope,
		MaxPayload:      t.cfg.maxPayload,
		RedeliveryDelay: 0,
	}
	if t.cfg.format == Envelope {
		if err := t.ensureDLQ(ctx, s.dlq); err != nil {
			releaseClientID(id)
			return nil, fmt.Errorf("mqtt: subscribe %s: %w", sub.Topic, err)
		}
	}

	o := t.clientOptions(id, false)
	o.SetAutoAckDisabled(true)
	o.SetDefaultPublishHandler(s.arrive)
	o.SetConnectionAttemptHandler(func(_ *url.URL, c *tls.Config) *tls.Config {
		s.epoch.Add(1) // messages from here on belong to a new connection
		return c
	})
	o.SetOnConnectHandler(s.onConnect)
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		s.log.Warn("mqtt: subscriber connection lost; reconnecting", "err", err)
	})
	s.client = paho.NewClient(o)

	t.mu.Lock()
	t.streams[s] = struct{}{}
	t.sessions[id] = struct{}{}
	t.mu.Unlock()

	fail := func(err error) (transport.Stream, error) {
		s.shut(0)
		return nil, fmt.Errorf("mqtt: subscribe %s as %s: %w", filter, id, err)
	}
	if err := t.connect(ctx, s.client); err != nil {
		return fail(err)
	}
	select {
	case err := <-s.first:
		if err != nil {
			return fail(err)
		}
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	return s, nil
}

// subscriptionFilter returns the filter to subscribe to for sub.
func subscriptionFilter(sub transport.Subscription) (string, error) {
	if sub.Topic == "" {
		return "", fmt.Errorf("%w: empty topic filter", transport.ErrInvalidOption)
	}
	if err := validFilter(sub.Topic); err != nil {
		return "", err
	}
	switch sub.Options[OptionShare] {
	case "", "true":
	case "false":
		return sub.Topic, nil
	default:
		return "", fmt.Errorf("%w: option %s=%q: want true or false", transport.ErrInvalidOption, OptionShare, sub.Options[OptionShare])
	}
	if sub.Group == "" {
		return sub.Topic, nil
	}
	if strings.ContainsAny(sub.Group, "/+#\x00") {
		return "", fmt.Errorf("%w: group %q: '/', '+' and '#' are not allowed in a shared subscription name", transport.ErrInvalidOption, sub.Group)
	}
	return "$share/" + sub.Group + "/" + sub.Topic, nil
}

// validFilter checks the wildcard rules of MQTT 3.1.1 section 4.7.
func validFilter(f string) error {
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case strings.Contains(l, "#") && (l != "#" || i != len(levels)-1):
			return fmt.Errorf("%w: topic filter %q: '#' must be a whole last level", transport.ErrInvalidOption, f)
		case strings.Contains(l, "+") && l != "+":
			return fmt.Errorf("%w: topic filter %q: '+' must be a whole level", transport.ErrInvalidOption, f)
		}
	}
	if strings.ContainsRune(f, 0) {
		return fmt.Errorf("%w: topic filter contains NUL", transport.ErrInvalidOption)
	}
	return nil
}

// defaultClientID derives a stable client ID from sub's group and topic.
func defaultClientID(sub transport.Subscription) string {
	sum := sha256.Sum256([]byte(sub.Group + "\x00" + sub.Topic))
	name := sub.Group
	if name == "" {
		name = "sub"
	}
	if len(name) > 32 {
		name = name[:32]
	}
	return "ferry-" + name + "-" + hex.EncodeToString(sum[:6])
}

// pickClientID claims sub's client ID in this process.
func pickClientID(sub transport.Subscription) (string, error) {
	if sub.Consumer != "" {
		if !claimClientID(sub.Consumer) {
			return "", fmt.Errorf("%w: client ID (Consumer) %q is already used by an open stream in this process",
				transport.ErrInvalidOption, sub.Consumer)
		}
		return sub.Consumer, nil
	}
	base := defaultClientID(sub)
	for n := 1; ; n++ {
		id := base
		if n > 1 {
			id += "-" + strconv.Itoa(n)
		}
		if claimClientID(id) {
			return id, nil
		}
	}
}

// stream is one subscription on its own client and session.
type stream struct {
	t        *Transport
	sub      transport.Subscription
	filter   string
	clientID string
	dlq      string
	sem      transport.Semantics
	client   paho.Client
	log      *slog.Logger

	epoch atomic.Uint64 // connection attempts so far

	qmu    sync.Mutex
	queue  []*delivery // arrived, not yet received
	qhead  int
	acks   *ackQueue // the current connection's ack order
	notify chan struct{}

	first     chan error // the first subscription's outcome
	firstOnce sync.Once
	closed    chan struct{}
	closeOnce sync.Once
	closing   atomic.Bool
}

var _ transport.Stream = (*stream)(nil)

// Semantics declares what the stream guarantees; see the package
// documentation.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// onConnect (re)subscribes after every connection: the broker may have lost
// the session (a restart without persistence).
func (s *stream) onConnect(c paho.Client) {
	go func() {
		backoff := 100 * time.Millisecond
		for {
			tok := c.Subscribe(s.filter, qos, nil)
			var err error
			select {
			case <-tok.Done():
				err = tok.Error()
			case <-s.closed:
				return
			}
			if err == nil {
				if st, ok := tok.(*paho.SubscribeToken); ok {
					for _, code := range st.Result() {
						if code == 0x80 {
							err = fmt.Errorf("broker refused the subscription (SUBACK 0x80; is the filter or $share allowed?)")
						}
					}
				}
			}
			first := false
			s.firstOnce.Do(func() { first = true; s.first <- err })
			if err == nil {
				if !first {
					s.log.Info("mqtt: resubscribed after reconnect")
				}
				return
			}
			if first {
				return // Subscribe reports it
			}
			s.log.Warn("mqtt: resubscribe failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.closed:
				return
			}
			backoff = min(2*backoff, s.t.cfg.maxReconnect)
			if !c.IsConnectionOpen() {
				return // the next onConnect takes over
			}
		}
	}()
}

// arrive is paho's message handler, called in arrival order from paho's
// router goroutine. It must not block: it records the delivery's place in
// the ack order and queues it for Receive.
func (s *stream) arrive(_ paho.Client, pm paho.Message) {
	d := &delivery{s: s, pm: pm, recv: time.Now()}
	ep := s.epoch.Load()
	s.qmu.Lock()
	if s.acks == nil || s.acks.epoch != ep {
		s.acks = &ackQueue{epoch: ep} // a new connection: the old order is void
	}
	d.q = s.acks
	d.q.push(d)
	s.queue = append(s.queue, d)
	s.qmu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Receive returns the next delivery in arrival order. It is called from one
// goroutine at a time. A malformed envelope is not returned: it is
// published to the stream's DLQ and acked; if that publish fails, Receive
// returns the error and tries the same message again on the next call.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	for {
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
	if s.t.cfg.format == Envelope {
		if err := decodeEnvelope(payload, m); err != nil {
			if derr := s.deadLetter(ctx, d, err); derr != nil {
				return false, derr
			}
			d.settled.Store(true)
			d.q.ack(d)
			return false, nil
		}
	} else {
		m.Payload = payload
		m.ID = s.t.cfg.idFunc(topic, payload)
		m.Key = s.t.cfg.keyFunc(topic, payload)
	}
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
	return true, nil
}

// deadLetter publishes a malformed message to the stream's DLQ with the
// error context.
func (s *stream) deadLetter(ctx context.Context, d *delivery, cause error) error {
	topic, payload := d.pm.Topic(), d.pm.Payload()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	dl := &handler.Message{
		ID:      ContentHash(topic, payload),
		Key:     topic,
		Topic:   s.dlq,
		Payload: payload,
		Headers: map[string]string{
			transport.HeaderError:          cause.Error(),
			transport.HeaderErrorClass:     handler.Class(cause),
			transport.HeaderAttempts:       "1",
			transport.HeaderSubscription:   s.clientID,
			transport.HeaderOriginalTopic:  topic,
			transport.HeaderOriginalPart:   "-1",
			transport.HeaderOriginalOffset: "-1",
			transport.HeaderOriginalBroker: strconv.Itoa(int(d.pm.MessageID())),
			transport.HeaderFirstFailure:   now,
			transport.HeaderLastFailure:    now,
		},
	}
	if err := s.t.publish(ctx, dl, false); err != nil {
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
	s.shut(disconnectQuiesce(ctx))
	return nil
}

// shut closes the stream and releases its client ID.
func (s *stream) shut(quiesce uint) {
	s.closing.Store(true)
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.client != nil {
			s.client.Disconnect(quiesce)
		}
		s.t.mu.Lock()
		delete(s.t.streams, s)
		s.t.mu.Unlock()
		releaseClientID(s.clientID)
	})
}

// ackQueue keeps one connection's deliveries in arrival order and sends
// their PUBACKs in that order: an ack is held until every earlier delivery
// is settled (MQTT 3.1.1 section 4.6).
type ackQueue struct {
	epoch uint64
	mu    sync.Mutex
	items []*delivery
	head  int
}

func (q *ackQueue) push(d *delivery) {
	q.mu.Lock()
	q.items = append(q.items, d)
	q.mu.Unlock()
}

// ack marks d acked and sends the PUBACKs of the settled prefix. paho's
// Ack is called under q.mu so that PUBACKs leave in order; it only hands
// the packet to the connection's writer (or drops it if that connection is
// gone, in which case the broker redelivers on the next one).
func (q *ackQueue) ack(d *delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d.acked = true
	for q.head < len(q.items) && q.items[q.head].acked {
		q.items[q.head].pm.Ack()
		q.items[q.head] = nil
		q.head++
	}
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// delivery is one received message.
type delivery struct {
	msg     handler.Message
	s       *stream
	pm      paho.Message
	q       *ackQueue
	recv    time.Time
	acked   bool // under q.mu
	settled atomic.Bool
}

var _ transport.Delivery = (*delivery)(nil)

// Message returns the message, valid until the delivery is settled.
func (d *delivery) Message() *handler.Message { return &d.msg }

// Ack records that the message is handled. Its PUBACK is sent as soon as
// every message that arrived before it on the same connection is acked
// too; until then it is held (see the package documentation). Ack returns
// [transport.ErrSettled] on a delivery already acked, and
// [transport.ErrClosed] after the stream was closed (the message stays in
// the session and is redelivered).
func (d *delivery) Ack(context.Context) error {
	select {
	case <-d.s.closed:
		return fmt.Errorf("mqtt: ack %s: %w", d.msg.ID, transport.ErrClosed)
	default:
	}
	if !d.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("mqtt: ack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	d.q.ack(d)
	return nil
}

// errNoNack is the cause in every Nack error.
var errNoNack = fmt.Errorf("MQTT 3.1.1 has no negative acknowledgement: the broker redelivers an unacked message only when the session reconnects; retry in process and dead-letter (middleware), then Ack: %w", errors.ErrUnsupported)

// Nack is not supported by MQTT: it returns an error wrapping
// errors.ErrUnsupported and leaves the delivery unsettled, so that the
// caller can still dead-letter and Ack it. Left unsettled, it holds back
// the PUBACKs of every later message of its connection until the stream is
// closed or reconnects, when the broker redelivers it and them. On a
// delivery already acked it returns [transport.ErrSettled].
func (d *delivery) Nack(context.Context, time.Duration) error {
	if d.settled.Load() {
		return fmt.Errorf("mqtt: nack %s: %w", d.msg.ID, transport.ErrSettled)
	}
	return fmt.Errorf("mqtt: nack %s: %w", d.msg.ID, errNoNack)
}
