package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// Scheme is the URL scheme this package registers: kafka://host:port,...
const Scheme = "kafka"

// ErrRevoked is returned by Ack and Nack for a message whose partition was
// revoked (a rebalance moved it to another member, or the revoke timeout
// passed) before it was settled. Nothing is committed for it: the
// partition's new owner delivers it again. The Router logs it; there is
// nothing else to do. It wraps [transport.ErrRevoked], so
// errors.Is(err, transport.ErrRevoked) holds. After Stream.Close, Ack and
// Nack return an error wrapping [transport.ErrClosed] instead.
var ErrRevoked = fmt.Errorf("kafka: partition revoked; the message will be redelivered to its new owner: %w", transport.ErrRevoked)

// ErrGroupActive is returned by [Transport.ResetOffsets] when the group
// still has live members: offsets can only be reset while every consumer of
// the group is stopped. Stop them and try again.
var ErrGroupActive = errors.New("kafka: group has live members")

// Transport is a connection to a Kafka cluster that publishes and
// subscribes, made by [New] or by opening a kafka URL with
// [transport.Open]. It also implements [transport.BatchPublisher],
// [transport.Declarer], [transport.DLQNamer], [transport.DeadLetters],
// [transport.LagReporter] and offset resets ([Transport.ResetOffsets]).
// Its methods may be called concurrently.
type Transport struct {
	brokers []string
	cfg     config

	client sarama.Client // producer and admin requests
	prod   *producer

	mu      sync.Mutex
	streams map[*stream]struct{}
	closed  bool
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
	_ transport.DLQNamer       = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
)

// New connects to the Kafka cluster that rawURL names and returns a
// Transport configured by the URL and then by opts. rawURL is a kafka URL,
// "kafka://host:port[,host:port...][?key=value&...]"; its query keys,
// listed on [URLOpener], map one to one onto Options, and opts apply after
// them:
//
//   - [Group]: the default consumer group (none)
//   - [StartAt]: where a new group starts ([Latest])
//   - [Partitioner]: how a Key picks its partition ([Murmur2])
//   - [PartitionWindow]: messages in flight per partition (MaxInFlight)
//   - [DeliveryTimeout], [Compression], [Linger], [MaxPayload]: publishing
//   - [SessionTimeout], [Heartbeat], [CommitInterval], [RevokeTimeout],
//     [Assignment]: the group
//   - [TLS], [SASL], [ClientID], [Version]: the connection
//   - [WithLogger]: where the transport logs (slog.Default())
//
// Everything is checked here: a bad URL or option returns an error
// wrapping [transport.ErrInvalidOption] that names it (never the
// password). New then fetches the cluster's metadata; ctx bounds that wait.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	brokers, cfg, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	sc, err := cfg.producerConfig()
	if err != nil {
		return nil, err
	}
	client, err := connect(ctx, brokers, sc)
	if err != nil {
		return nil, err
	}
	p, err := newProducer(client, &cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &Transport{brokers: brokers, cfg: cfg, client: client, prod: p, streams: map[*stream]struct{}{}}, nil
}

// admin returns a cluster admin on t.client. NewClusterAdminFromClient
// shares the client; the admin is never closed, since closing it would
// close the client.
func (t *Transport) admin() (sarama.ClusterAdmin, error) {
	a, err := sarama.NewClusterAdminFromClient(t.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: admin: %w", err)
	}
	return a, nil
}

// connect makes a sarama client, abandoning the wait (not the dial) when
// ctx ends: sarama's constructor takes no context.
func connect(ctx context.Context, brokers []string, sc *sarama.Config) (sarama.Client, error) {
	type result struct {
		c   sarama.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := sarama.NewClient(brokers, sc)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("kafka: connect: %w", r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("kafka: connect: %w", ctx.Err())
	}
}

// Close closes every stream the Transport opened (committing what finished
// and releasing the rest for redelivery), flushes the producer, and
// disconnects. ctx bounds the wait. Calls after Close return
// [transport.ErrClosed]; a second Close does nothing and returns nil.
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
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.prod.close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := t.client.Close(); err != nil && !errors.Is(err, sarama.ErrClosedClient) {
		errs = append(errs, fmt.Errorf("kafka: close: %w", err))
	}
	return errors.Join(errs...)
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}
