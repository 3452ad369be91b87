package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// Scheme is the Semantics.Transport and Facts.Transport name of this
// transport. URLs use amqp:// or amqps://.
const Scheme = "amqp"

func init() {
	transport.Register("amqp", URLOpener{})
	transport.Register("amqps", URLOpener{})
}

// URLOpener opens amqp:// and amqps:// URLs:
//
//	amqp://user:password@host:5672/vhost?queue_type=quorum&delivery_limit=10
//
// Credentials and the vhost come from the URL (guest:guest and "/" when
// absent, as in amqp091-go); each query key maps to one Option: queue_type
// ([QueueType]), exchange_type ([ExchangeKind]), delivery_limit
// ([DeliveryLimit]), prefetch ([Prefetch]), heartbeat ([Heartbeat]),
// mandatory ([Mandatory]), shards ([Shards]), publish_channels
// ([PublishChannels]), reconnect_max ([Reconnect]) and, for test brokers
// only, insecure_skip_verify ([TLS]). Options given to the opener apply
// first, then the URL's.
type URLOpener struct {
	Options []Option
}

// OpenURL opens a Transport from u.
func (o URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	opts, err := optionsFromURL(u.Query())
	if err != nil {
		return nil, err
	}
	c := *u
	c.RawQuery = ""
	return New(ctx, c.String(), append(append([]Option(nil), o.Options...), opts...)...)
}

// Transport is a connection to RabbitMQ that publishes and subscribes. It
// implements [transport.Transport], [transport.BatchPublisher],
// [transport.DeadLetters] and [transport.LagReporter]. All methods may be
// called concurrently.
//
// It keeps one AMQP connection, redialled with exponential backoff when
// lost; publishing uses confirm-mode channels on it, and each stream its own
// channel. After a reconnect every stream re-declares its topology and
// resumes consuming, and the publisher re-declares exchanges before first
// use.
type Transport struct {
	cfg  config
	conn *connector
	pub  *publisher

	mu      sync.Mutex
	streams map[*stream]struct{}
	closed  bool
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)

// New connects to the broker at rawURL (amqp:// or amqps://; query keys
// are not read here, use [URLOpener] or [transport.Open] for them) and
// returns a Transport configured by opts. It dials once before returning,
// bounded by ctx, so that a wrong address or credentials fail here; later
// losses are repaired in the background. Errors never contain the password.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg := newConfig(opts...)
	if cfg.err != nil {
		return nil, cfg.err
	}
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: bad URL: %s", transport.ErrInvalidOption, safeURIError(err))
	}
	acf := amqp.Config{
		Heartbeat:       cfg.heartbeat,
		Vhost:           uri.Vhost,
		TLSClientConfig: cfg.tls,
		Locale:          "en_US",
		Properties:      amqp.Table{"connection_name": "ferry"},
	}
	if uri.Scheme == "amqps" && acf.TLSClientConfig == nil {
		acf.TLSClientConfig = newTLSConfig(uri.Host)
	} else if acf.TLSClientConfig != nil && acf.TLSClientConfig.ServerName == "" {
		c := acf.TLSClientConfig.Clone()
		c.ServerName = uri.Host
		acf.TLSClientConfig = c
	}
	acf.Dial = amqp.DefaultDial(30 * time.Second)
	t := &Transport{cfg: cfg, streams: make(map[*stream]struct{})}
	t.conn = newConnector(rawURL, acf, cfg.logger, cfg.reconnectMin, cfg.reconnectMax)
	if err := t.conn.start(ctx); err != nil {
		return nil, err
	}
	t.pub = newPublisher(t)
	return t, nil
}

// safeURIError keeps ParseURI's message but never the URL itself.
func safeURIError(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 {
		return "unparsable URI"
	}
	return msg
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
		NativeDLQ:  quorum,
		FanOut:     true,
		Headers:    true,
		MaxPayload: DefaultMaxPayload,
	}
	switch {
	case o.shards > 1:
		s.Ordering = transport.OrderPerKey
		if o.balanced() {
			// A shard freed by a member that left is taken within a
			// balancing tick or two.
			s.RedeliveryDelay = 2 * balanceTick
		}
	case o.ordered:
		s.Ordering = transport.OrderPerTopic
	}
	return s
}
