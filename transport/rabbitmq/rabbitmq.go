package rabbitmq

import (
	"context"
	"errors"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// Scheme is the Semantics.Transport and Facts.Transport name of this
// transport. URLs use amqp:// or amqps://.
const Scheme = "amqp"

// Transport is a connection to RabbitMQ that publishes and subscribes. It
// implements [transport.Transport], [transport.BatchPublisher],
// [transport.Declarer], [transport.DLQNamer], [transport.DeadLetters],
// [transport.LagReporter] and [transport.AsyncPublisher]. All methods may be called concurrently.
//
// It keeps one AMQP connection; publishing uses confirm-mode channels on
// it, and each stream its own channel. After a connection loss the next
// call that needs the connection dials again; every stream then
// re-declares its topology and resumes consuming, and the publisher
// re-declares exchanges before first use.
type Transport struct {
	cfg  config
	ep   endpoint
	conn *connector
	pub  *publisher

	mu      sync.Mutex
	streams map[*stream]struct{}
	closed  bool

	delay delayState // delay.go
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
	_ transport.DLQNamer       = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)

// New connects to the broker at rawURL and returns a Transport configured
// by the URL's query keys and then by opts. rawURL is
// amqp://user:password@host:port/vhost?key=value&… (amqps:// for TLS); the
// package documentation lists the keys, each the same as an [Option]:
//
//   - [Ordered]: a single active consumer per group (default true)
//   - [Shards]: key-hashed queues per group (default 1)
//   - [QueueType], [DeliveryLimit], [Prefetch], [ExchangeKind]: queues
//   - [Mandatory], [PublishChannels], [PublishWindow]: publishing
//   - [Heartbeat], [Timeout], [AllowPlaintextAuth], [TLS] (and the URL keys
//     tls_ca, tls_cert, tls_key, tls_insecure): the connection
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it; nothing is reported later.
// New dials once before returning, bounded by ctx and [Timeout], so that a
// wrong address or credentials fail here: refused credentials wrap
// [ErrAuth], and a user name and password over amqp:// without TLS are
// refused before dialling unless allow_plaintext_auth=true (guest:guest
// excepted). Errors and log lines never contain the
// password.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg, ep, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	acf := amqp.Config{
		Heartbeat:       cfg.heartbeat,
		Vhost:           ep.uri.Vhost,
		TLSClientConfig: cfg.tls,
		Locale:          "en_US",
		Properties:      amqp.Table{"connection_name": "ferry"},
	}
	if ep.tls && acf.TLSClientConfig == nil {
		acf.TLSClientConfig = newTLSConfig(ep.uri.Host)
	} else if acf.TLSClientConfig != nil && acf.TLSClientConfig.ServerName == "" {
		c := acf.TLSClientConfig.Clone()
		c.ServerName = ep.uri.Host
		acf.TLSClientConfig = c
	}
	t := &Transport{cfg: cfg, ep: ep, streams: make(map[*stream]struct{})}
	t.conn = newConnector(ep, cfg.timeout, acf, cfg.logger)
	if _, err := t.conn.get(ctx); err != nil {
		_ = t.conn.close(context.Background())
		return nil, err
	}
	t.pub = newPublisher(t)
	return t, nil
}

// Close stops every stream (their unacked deliveries return to the queue),
// waits for publishes in flight until ctx ends, and closes the connection.
// Publish and Subscribe after Close return [transport.ErrClosed]; a second
// Close does nothing.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		if err := s.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, err)
		}
	}
	t.pub.close(ctx)
	if err := t.conn.close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Declare returns the Semantics a stream of sub would declare, without
// touching the broker, or the error Subscribe would return for sub's
// options. See [Ordered] and [Shards] for the ordering it declares.
func (t *Transport) Declare(sub transport.Subscription) (transport.Semantics, error) {
	o, err := t.parseSubscription(sub)
	if err != nil {
		return transport.Semantics{}, err
	}
	return semantics(&o), nil
}

// DLQName returns the dead-letter queue of sub: "<queue>.dlq", where queue
// is sub's "queue" option or "<topic>.<group>" ("<topic>.default" without
// a group). Subscribe declares it as a queue and as an exchange of the
// same name bound to it, and makes it the queue's dead-letter target, so
// that the broker's dead letters (a delivery limit reached), the
// transport's and the dead-letter middleware's (which publishes to the
// name the Router passes it, [transport.DLQName]) all land in it, and
// [Transport.ListDLQ] and [Transport.ReplayDLQ] take the same name.
func (t *Transport) DLQName(sub transport.Subscription) string { return dlqName(queueName(sub)) }

// Ordering hints: what would keep order where a stream keeps none.
const (
	hintOrdered = "the URL option ordered=true (its default: one active consumer per group) or shards=N (key-hashed queues the members share)"
	hintPassive = "a queue Subscribe declares itself (leave out the option declare=false)"
)

// semantics is what a stream on a queue of these options guarantees.
func semantics(o *subOptions) transport.Semantics {
	quorum := o.queueType == QueueQuorum
	s := transport.Semantics{
		Transport:  Scheme,
		Ordering:   transport.OrderNone,
		Ack:        transport.AckPerMessage,
		Redelivery: transport.RedeliverOnNack,
		NackDelay:  true,
		Attempts:   quorum,
		NativeDLQ:  quorum && !o.passive,
		FanOut:     true,
		Headers:    true,
		MaxPayload: DefaultMaxPayload,
	}
	switch {
	case o.passive:
		// An existing queue: whether it has a single active consumer is
		// not known.
		s.OrderingHint = hintPassive
	case o.shards > 1:
		s.Ordering = transport.OrderPerKey
		if o.balanced() {
			// A shard freed by a member that left is taken within a
			// balancing tick or two.
			s.RedeliveryDelay = 2 * balanceTick
		}
	case o.ordered:
		s.Ordering = transport.OrderPerTopic
	default:
		s.OrderingHint = hintOrdered
	}
	return s
}
