package mqtt

import (
	"context"
	"errors"
	"time"
)

// This file is the seam between the transport and the library that speaks
// one version of the MQTT protocol. Everything else in the package (the
// publish path, streams, sessions, the DLQ) works on a conn; client311.go
// implements it for MQTT 3.1.1 on paho.mqtt.golang. A second protocol
// version is a second implementation chosen in dial.

// An inbound message is one PUBLISH the broker sent on a connection, as
// the client library hands it over. Ack queues its PUBACK (manual-ack
// connections only); MQTT gives no confirmation that it reached the broker.
type inbound interface {
	Topic() string
	Payload() []byte
	Duplicate() bool
	Retained() bool
	MessageID() uint16
	Ack()
}

// A token is the outcome of one request that the broker answers.
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
	// connect makes the first connection, bounded by ctx.
	connect(ctx context.Context) error
	// publish hands a QoS 1 PUBLISH to the connection and returns the token
	// completed by its PUBACK, or an error wrapping errNotSent if the
	// connection is down and nothing was sent. While the library is
	// reconnecting the message is kept and sent after the reconnect.
	publish(topic string, payload []byte, retain bool) (token, error)
	// subscribe subscribes to filters at QoS 1, bounded by ctx, and reports
	// which ones the broker granted; err is for the request as a whole.
	subscribe(ctx context.Context, filters []string) (granted []bool, err error)
	// unsubscribe ends subscriptions, bounded by ctx.
	unsubscribe(ctx context.Context, filters []string) error
	// up reports whether the connection is open.
	up() bool
	// disconnect closes the connection, waiting at most quiesce for work
	// in progress, and stops reconnecting.
	disconnect(quiesce time.Duration)
}

// connSpec is what a connection is opened with.
type connSpec struct {
	clientID  string
	clean     bool // clean session: no state kept at the broker
	manualAck bool // PUBACKs only through inbound.Ack
	reconnect bool // reconnect after a lost connection, with backoff

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
	// one (not after disconnect).
	onUp   func()
	onLost func(error)
}

// dial returns t's connection for spec, not yet connected.
func (t *Transport) dial(spec connSpec) conn { return newConn311(t, spec) }
