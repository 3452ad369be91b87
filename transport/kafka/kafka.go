package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// Scheme is the URL scheme this package registers: kafka://host:port,...
const Scheme = "kafka"

// ErrRevoked is returned by Ack and Nack for a message whose partition was
// revoked (a rebalance moved it to another member, or the revoke timeout
// passed) before it was settled. Nothing is committed for it: the
// partition's new owner delivers it again. The Router logs it; there is
// nothing else to do. After Stream.Close, Ack and Nack return an error
// wrapping [transport.ErrClosed] instead.
var ErrRevoked = errors.New("kafka: partition revoked; the message will be redelivered to its new owner")

// ErrGroupActive is returned by [Transport.ResetOffsets] when the group
// still has live members: offsets can only be reset while every consumer of
// the group is stopped. Stop them and try again.
var ErrGroupActive = errors.New("kafka: group has live members")

// Transport is a connection to a Kafka cluster that publishes and
// subscribes. It also implements [transport.DeadLetters],
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
	_ transport.Transport   = (*Transport)(nil)
	_ transport.DeadLetters = (*Transport)(nil)
	_ transport.LagReporter = (*Transport)(nil)
)

// New connects to the Kafka cluster reached through brokers ("host:port")
// and returns a Transport configured by opts. It fetches the cluster's
// metadata before returning; ctx bounds that wait. Options are checked
// once here: a bad one returns an error wrapping
// [transport.ErrInvalidOption].
func New(ctx context.Context, brokers []string, opts ...Option) (*Transport, error) {
	cfg := newConfig(opts...)
	if cfg.err != nil {
		return nil, cfg.err
	}
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: kafka: no broker address", transport.ErrInvalidOption)
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

// baseConfig is the sarama configuration shared by producers, consumers
// and admin requests: version, client ID, TLS and SASL.
func (c *config) baseConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = c.version
	sc.ClientID = c.clientID
	sc.Net.DialTimeout = 10 * time.Second
	sc.Metadata.Retry.Max = 3
	sc.Metadata.Retry.Backoff = 100 * time.Millisecond
	if c.tls != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = c.tls
	}
	if c.saslMech != saslNone {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Handshake = true
		sc.Net.SASL.User = c.saslUser
		sc.Net.SASL.Password = c.saslPass
		switch c.saslMech {
		case SASLPlain:
			sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case SASLScramSHA256:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{sha512: false} }
		case SASLScramSHA512:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{sha512: true} }
		}
	}
	return sc
}

// producerConfig is acks=all, idempotent, with retries bounded by the
// delivery timeout.
func (c *config) producerConfig() (*sarama.Config, error) {
	sc := c.baseConfig()
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1 // required by sarama's idempotent producer
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Timeout = min(c.deliveryTimeout, 10*time.Second)
	sc.Producer.Retry.Backoff = 100 * time.Millisecond
	sc.Producer.Retry.Max = max(3, int(c.deliveryTimeout/(250*time.Millisecond)))
	// MaxMessageBytes also caps each partition's record batch, which the
	// broker refuses above its message.max.bytes (1048588 by default): keep
	// sarama's 1 MiB unless MaxPayload needs room for a larger record.
	sc.Producer.MaxMessageBytes = max(1<<20, c.maxPayload+32<<10)
	sc.Producer.Compression = c.compression
	sc.Producer.Flush.Frequency = c.linger
	switch c.partitioner {
	case FNV1a:
		sc.Producer.Partitioner = sarama.NewHashPartitioner
	default:
		sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: kafka: %v", transport.ErrInvalidOption, err)
	}
	return sc, nil
}

// consumerConfig is a group member's configuration: manual marking with
// periodic commits of the marked (contiguous, finished) offsets.
func (c *config) consumerConfig(start Position, instance string) (*sarama.Config, error) {
	sc := c.baseConfig()
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = true // commits what we mark, never more
	sc.Consumer.Offsets.AutoCommit.Interval = c.commitInterval
	sc.Consumer.Offsets.Initial = sarama.OffsetNewest
	if start == Earliest {
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	}
	sc.Consumer.Group.Session.Timeout = c.sessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = c.heartbeat
	sc.Consumer.MaxWaitTime = 250 * time.Millisecond
	sc.Consumer.Group.InstanceId = instance
	switch c.balance {
	case RoundRobin:
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	case Sticky:
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	case CooperativeSticky:
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	default:
		sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: kafka: %v", transport.ErrInvalidOption, err)
	}
	return sc, nil
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
