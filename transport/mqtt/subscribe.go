package mqtt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ferrymq/ferry/transport"
)

// Subscription.Options keys this transport reads, with
// [transport.OptionsQuery].
const (
	// OptionDLQ names the DLQ topic of a subscription: where the stream
	// sends malformed envelopes, and what [Transport.DLQName] returns for
	// the dead-letter middleware. It must start with the DLQ prefix or end
	// in ".dlq". The default is the DLQ prefix followed by the Group.
	OptionDLQ = "dlq"

	// OptionShare, "false" (the default) or "true", says whether a
	// Subscription with a Group is an MQTT shared subscription,
	// $share/<Group>/<Topic>, whose members split the messages. Shared
	// subscriptions keep no order (each member sees its share), are not
	// kept by Mosquitto 2.0 across a broker restart (messages queued for
	// them are lost), and cannot see gaps; see the package documentation.
	// With "false" the Group names one persistent session, which one
	// consumer holds at a time.
	OptionShare = "share"
)

// orderingHint is what a shared subscription's Semantics.OrderingHint
// says.
const orderingHint = "the subscription option share=false (the default): one consumer per group, in topic order"

// sessionTopicPrefix is where each stream's session claim lives (see
// session.go); a stream never hands messages under it to the Router.
const sessionTopicPrefix = "ferry/session/"

// plan is what a Subscription asks for, checked without I/O: the one
// reading of a Subscription that Declare, Subscribe and DLQName share.
type plan struct {
	filter string // what to subscribe to: sub.Topic, or $share/<group>/<topic>
	shared bool
	dlq    string
	sem    transport.Semantics
}

// plan reads and checks sub.
func (t *Transport) plan(sub transport.Subscription) (plan, error) {
	var p plan
	q := transport.OptionsQuery(Scheme, sub.Options)
	dlq, hasDLQ := q.String(OptionDLQ)
	p.shared, _ = q.Bool(OptionShare)
	if err := q.Err(); err != nil {
		return p, err
	}
	if err := validFilter(sub.Topic); err != nil {
		return p, fmt.Errorf("%w: mqtt: %w", transport.ErrInvalidOption, err)
	}
	if strings.HasPrefix(sub.Topic, sessionTopicPrefix) {
		return p, fmt.Errorf("%w: mqtt: topic filter %q: %s is Ferry's own (session claims)", transport.ErrInvalidOption, sub.Topic, sessionTopicPrefix)
	}
	if sub.Consumer != "" && !utf8.ValidString(sub.Consumer) {
		return p, fmt.Errorf("%w: mqtt: Consumer (the client ID) is not valid UTF-8", transport.ErrInvalidOption)
	}
	p.filter = sub.Topic
	if p.shared {
		switch {
		case sub.Group == "":
			return p, fmt.Errorf("%w: mqtt: option %s=true needs a Group: the shared subscription's name", transport.ErrInvalidOption, OptionShare)
		case strings.ContainsAny(sub.Group, "/+#\x00") || !utf8.ValidString(sub.Group):
			return p, fmt.Errorf("%w: mqtt: group %q: '/', '+', '#', NUL and invalid UTF-8 are not allowed in a shared subscription's name", transport.ErrInvalidOption, sub.Group)
		}
		p.filter = "$share/" + sub.Group + "/" + sub.Topic
	}
	p.dlq = t.DLQName(sub)
	switch {
	case hasDLQ && dlq == "":
		return p, fmt.Errorf("%w: mqtt: option %s is empty", transport.ErrInvalidOption, OptionDLQ)
	case hasDLQ && !t.isDLQ(dlq):
		return p, fmt.Errorf("%w: mqtt: option %s=%q: a DLQ topic starts with the DLQ prefix %q or ends in %q, so that Publish writes dead letters in the envelope, with their record",
			transport.ErrInvalidOption, OptionDLQ, dlq, t.cfg.dlqPrefix, transport.DLQSuffix)
	}
	if err := validTopic(p.dlq); err != nil {
		return p, fmt.Errorf("%w: mqtt: the DLQ topic (option %s, or the DLQ prefix and the group): %w", transport.ErrInvalidOption, OptionDLQ, err)
	}
	p.sem = t.semantics(p.shared)
	return p, nil
}

// semantics is what a stream declares; see the package documentation.
func (t *Transport) semantics(shared bool) transport.Semantics {
	s := transport.Semantics{
		Transport:       Scheme,
		Ordering:        transport.OrderPerTopic,
		Ack:             transport.AckInOrder,
		Redelivery:      transport.RedeliverOnReconnect,
		NackDelay:       false,
		Attempts:        false,
		Extend:          false,
		NativeDLQ:       false,
		FanOut:          true, // each group (one session, or one shared subscription) gets every message
		Replay:          false,
		Headers:         t.cfg.format != Raw,
		MaxPayload:      t.cfg.maxPayload,
		RedeliveryDelay: 0,
	}
	if shared {
		// The members of a shared subscription split each topic between
		// them: no order holds across the group.
		s.Ordering, s.OrderingHint = transport.OrderNone, orderingHint
	}
	return s
}

// Declare returns the Semantics that Subscribe(sub) would declare, without
// touching the broker, or the error wrapping [transport.ErrInvalidOption]
// that Subscribe would return for sub's options or names.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	p, err := t.plan(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return p.sem, nil
}

// DLQName returns the DLQ topic of sub: its "dlq" option, or the DLQ prefix
// ("ferry/dlq/" by default) followed by its Group, or (with no Group) its
// Consumer, or its derived client ID. The Router passes it to the
// dead-letter middleware, and the stream sends malformed envelopes there,
// so both use one DLQ. It implements [transport.DLQNamer]; Declare reports
// a name that is not a valid MQTT topic.
func (t *Transport) DLQName(sub transport.Subscription) string {
	if d := sub.Options[OptionDLQ]; d != "" {
		return d
	}
	switch {
	case sub.Group != "":
		return t.cfg.dlqPrefix + sub.Group
	case sub.Consumer != "":
		return t.cfg.dlqPrefix + sub.Consumer
	}
	return t.cfg.dlqPrefix + defaultClientID(sub)
}

// Subscribe opens sub on a connection of its own with a persistent session
// (clean session false; on MQTT 5 clean start false and the
// [SessionExpiry]) and subscribes to sub.Topic at the Transport's [QoS],
// returning once the broker has acknowledged the subscription.
//
//   - Topic is a topic filter: wildcards + and # are allowed.
//   - Group names the consumer group. By default ([OptionShare] false) a
//     group is one persistent session, held by one consumer at a time:
//     its client ID is Consumer, or one derived from Group and Topic. With
//     share=true it is a shared subscription, $share/<Group>/<Topic>
//     (Mosquitto 2, and any MQTT 5 broker): the members, each with a
//     session of its own, split the messages.
//   - Consumer is the MQTT client ID, which names the persistent session.
//     Empty means one derived from Group and Topic ("ferry-<group>-<hash>"),
//     stable across restarts. A member of a shared subscription adds "-"
//     and the Transport's [ClientID] if one is set, and "-2", "-3" … for
//     further members in one Transport: members in separate processes need
//     distinct client_id URL keys (or Consumers), stable across restarts.
//   - MaxInFlight is, on MQTT 5, the Receive Maximum the connection
//     announces: the broker sends at most that many unacknowledged
//     messages (1024 when 0, at most 65535). On MQTT 3.1.1 the broker sets
//     the window (Mosquitto max_inflight_messages, 20 by default).
//   - StartAtOldest is ignored: MQTT keeps no history (a new subscription
//     gets only the topic's retained message).
//   - Options: "dlq" ([OptionDLQ]) and "share" ([OptionShare]). Other
//     keys are an error.
//
// Before connecting, Subscribe publishes the stream's claim on the session
// (see the package documentation, "Sessions and client IDs"): a stream of
// another Transport or process holding the same client ID sees it, stops,
// and reports [ErrTakenOver], rather than the two taking the session from
// each other for ever. Within one Transport, a client ID already held by an
// open stream is an error.
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
	p, err := t.plan(sub)
	if err != nil {
		return nil, err
	}
	id, err := t.pickClientID(sub, p.shared)
	if err != nil {
		return nil, fmt.Errorf("mqtt: subscribe %s: %w", sub.Topic, err)
	}
	s := newStream(t, sub, p, id)
	if t.cfg.format == Envelope {
		if err := t.ensureDLQ(ctx, s.dlq); err != nil {
			t.release(id)
			return nil, fmt.Errorf("mqtt: subscribe %s: %w", sub.Topic, err)
		}
	}
	s.client = t.dial(connSpec{
		clientID:      id,
		clean:         false,
		manualAck:     true,
		reconnect:     true,
		sessionExpiry: t.sessionExpiry(),
		receiveMax:    receiveMax(sub.MaxInFlight),
		onMessage:     s.arrive,
		onTakenOver:   s.brokerTookOver,
		stop:          s.takenOver.Load,
		onAttempt:     func() { s.epoch.Add(1) }, // messages from here on belong to a new connection
		beforeDial:    s.beforeDial,
		onUp:          s.onConnect,
		onLost: func(err error) {
			if !s.takenOver.Load() {
				s.log.Warn("mqtt: subscriber connection lost; reconnecting", "err", err)
			}
		},
	})
	if err := t.claim(ctx, s); err != nil {
		t.release(id)
		return nil, fmt.Errorf("mqtt: subscribe %s as %s: %w", p.filter, id, err)
	}
	t.mu.Lock()
	t.streams[s] = struct{}{}
	t.mu.Unlock()

	fail := func(err error) (transport.Stream, error) {
		s.shut(0)
		return nil, fmt.Errorf("mqtt: subscribe %s as %s: %w", p.filter, id, err)
	}
	if err := s.client.connect(ctx); err != nil {
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

// receiveMax is the MQTT 5 Receive Maximum for a subscription that may
// hold n deliveries unsettled: n, or DefaultReceiveMaximum for 0, at most
// 65535.
func receiveMax(n int) uint16 {
	if n <= 0 {
		n = DefaultReceiveMaximum
	}
	return uint16(min(n, 0xFFFF))
}

// validFilter checks a topic filter: not empty, valid UTF-8, no NUL, and
// the wildcard rules of MQTT 3.1.1 section 4.7.
func validFilter(f string) error {
	if f == "" {
		return errors.New("empty topic filter")
	}
	if err := validString(f); err != nil {
		return fmt.Errorf("the topic filter %w", err)
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case strings.Contains(l, "#") && (l != "#" || i != len(levels)-1):
			return fmt.Errorf("topic filter %q: '#' must be a whole last level", f)
		case strings.Contains(l, "+") && l != "+":
			return fmt.Errorf("topic filter %q: '+' must be a whole level", f)
		}
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
		for !utf8.ValidString(name) { // do not cut a character in two
			name = name[:len(name)-1]
		}
	}
	return "ferry-" + name + "-" + hex.EncodeToString(sum[:6])
}

// pickClientID holds sub's client ID in t: Consumer, or the derived one.
// A shared subscription's member adds "-" and the Transport's [ClientID]
// when one is set (one setting names the process's members), and "-2",
// "-3" … for further members in one Transport.
func (t *Transport) pickClientID(sub transport.Subscription, shared bool) (string, error) {
	if sub.Consumer != "" {
		if !t.hold(sub.Consumer) {
			return "", fmt.Errorf("%w: client ID (Consumer) %q is already used by an open stream of this Transport",
				transport.ErrInvalidOption, sub.Consumer)
		}
		return sub.Consumer, nil
	}
	base := defaultClientID(sub)
	if !shared {
		if !t.hold(base) {
			return "", fmt.Errorf("%w: group %q on %q is already open on this Transport: a group that is not shared is one session, held by one consumer (set share=true for members that split the messages)",
				transport.ErrInvalidOption, sub.Group, sub.Topic)
		}
		return base, nil
	}
	if t.cfg.clientID != "" {
		base += "-" + t.cfg.clientID
	}
	for n := 1; ; n++ {
		id := base
		if n > 1 {
			id += "-" + strconv.Itoa(n)
		}
		if t.hold(id) {
			return id, nil
		}
	}
}
