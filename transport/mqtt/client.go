package mqtt

import (
	"context"
	"errors"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
)

// This file is the seam between the transport and the library that speaks
// one version of the MQTT protocol. Everything else in the package (the
// publish path, streams, sessions, the DLQ) works on a conn; client5.go
// implements it for MQTT 5 on paho.golang (autopaho), client311.go for
// MQTT 3.1.1 on paho.mqtt.golang. dial picks one by the configured
// [Version].

// An inbound message is one PUBLISH the broker sent on a connection, as
// the client library hands it over. Ack queues its acknowledgement
// (PUBACK, or PUBREC at QoS 2; manual-ack connections only) on the
// connection it arrived on, and drops it if that connection is gone (the
// broker redelivers on the next); MQTT gives no confirmation that it
// reached the broker.
type inbound interface {
	Topic() string
	Payload() []byte
	Duplicate() bool
	Retained() bool
	MessageID() uint16
	// Props returns the MQTT 5 properties, nil on MQTT 3.1.1 or when the
	// message had none.
	Props() *paho5.PublishProperties
	Ack()
}

// outbound is one PUBLISH to send.
type outbound struct {
	topic   string
	payload []byte
	retain  bool
	props   *paho5.PublishProperties // MQTT 5 only; nil for none
}

// A token is the outcome of one request that the broker answers. Error,
// read once Done is closed, is nil when the broker confirmed it, an error
// wrapping a reason ([ReasonError]) when it refused it, or one wrapping
// [transport.ErrUnknownOutcome] when the request may or may not have taken
// effect.
type token interface {
	Done() <-chan struct{}
	Error() error
}

// errNotSent is wrapped by conn.publish's error when the connection is
// down and nothing was handed to it.
var errNotSent = errors.New("not connected: nothing was sent")

// conn is one client connection under one client ID. Its methods may be
// called concurrently.
type conn interface {
	// connect makes the first connection, bounded by ctx and the connect
	// timeout. A broker that refuses it gives an error wrapping the
	// reason (ErrBadCredentials, ErrNotAuthorized).
	connect(ctx context.Context) error
	// publish hands a PUBLISH at the Transport's QoS to the connection
	// and returns the token completed by its acknowledgement, or an error:
	// wrapping errNotSent if the connection is down and nothing was sent,
	// or another (nothing was sent either). ctx bounds only the wait for
	// the broker's receive window. While the library is reconnecting a
	// message handed over is kept and sent after the reconnect.
	publish(ctx context.Context, out outbound) (token, error)
	// subscribe subscribes to filters at the Transport's QoS, bounded by
	// ctx, and reports for each filter nil (granted) or why the broker
	// refused it; err is for the request as a whole.
	subscribe(ctx context.Context, filters []string) (refused []error, err error)
	// unsubscribe ends subscriptions, bounded by ctx.
	unsubscribe(ctx context.Context, filters []string) error
	// up reports whether the connection is open.
	up() bool
	// maxPacket returns the largest packet the broker accepts, as it
	// said when the connection opened (MQTT 5 Maximum Packet Size), or 0
	// if it did not say.
	maxPacket() int
	// disconnect closes the connection, waiting at most quiesce for work
	// in progress, and stops reconnecting.
	disconnect(quiesce time.Duration)
}

// A batchAcker is a conn that sends several acknowledgements at once.
type batchAcker interface {
	ackAll(due []inbound)
}

// ackSender returns how c sends acknowledgements: all at once if it can,
// else one by one.
func ackSender(c conn) func([]inbound) {
	if b, ok := c.(batchAcker); ok {
		return b.ackAll
	}
	return ackEach
}

// connSpec is what a connection is opened with.
type connSpec struct {
	clientID  string
	clean     bool // clean session (3.1.1) or clean start (5): no state kept from before
	manualAck bool // acknowledgements only through inbound.Ack
	reconnect bool // reconnect after a lost connection, with backoff

	// sessionExpiry is the MQTT 5 Session Expiry Interval in seconds:
	// how long the broker keeps the session after a disconnect (0: not
	// at all; 0xFFFFFFFF: until removed). MQTT 3.1.1 keeps a session
	// that is not clean until it is removed.
	sessionExpiry uint32
	// receiveMax is the MQTT 5 Receive Maximum: the most unacknowledged
	// QoS 1 and 2 messages the broker sends at once (0: the default).
	receiveMax uint16

	// onMessage receives every PUBLISH in arrival order, from one
	// goroutine at a time; it must not block. Nil means none are expected.
	onMessage func(inbound)
	// onAttempt runs before each connection attempt (the first and every
	// reconnect), before anything is sent on the new connection.
	onAttempt func()
	// beforeDial runs before each attempt opens a network connection, in
	// the attempt's goroutine; it may block, and an error ends the attempt
	// without contacting the broker. first is true for the first attempt.
	beforeDial func(first bool) error
	// onUp runs after each successful connection, onLost after each lost
	// one (not after disconnect), with the reason if one is known.
	onUp   func()
	onLost func(error)
	// onTakenOver runs, MQTT 5 only, when the broker closes the
	// connection because another one took the session over (reason code
	// 0x8E), before the connection manager decides whether to reconnect.
	onTakenOver func(error)
	// stop, if set, is asked after a lost connection whether to stop
	// reconnecting.
	stop func() bool
}

// dial returns t's connection for spec, not yet connected.
func (t *Transport) dial(spec connSpec) conn {
	if t.cfg.version == MQTT311 {
		return newConn311(t, spec)
	}
	return newConn5(t, spec)
}
