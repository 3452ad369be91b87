package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
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
//   - [DeliveryTimeout], [Compression], [Linger], [MaxPayload],
//     [PublishWindow]: publishing
//   - [SessionTimeout], [Heartbeat], [CommitInterval], [RevokeTimeout],
//     [Assignment]: the group
//   - [TLS], [SASL], [AllowPlaintextAuth], [ConnectTimeout], [ClientID],
//     [Version]: the connection
//   - [WithLogger]: where the transport logs (slog.Default())
//
// Everything is checked here: a bad URL or option returns an error
// wrapping [transport.ErrInvalidOption] that names it (never the
// password); SASL without TLS is refused unless [AllowPlaintextAuth]. New
// then connects and fetches the cluster's metadata, within
// [ConnectTimeout] and ctx: wrong credentials give an error wrapping
// [ErrAuth]; every error names the brokers and what was attempted.
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	brokers, cfg, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	sc, err := cfg.producerConfig()
	if err != nil {
		return nil, err
	}
	client, err := connect(ctx, brokers, sc, &cfg)
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

// ErrAuth is wrapped by the error of [New] (and of Subscribe) when the
// brokers refuse the SASL credentials: a wrong user, password or
// mechanism. The error names the brokers and the mechanism, never the user
// or the password.
var ErrAuth = fmt.Errorf("kafka: authentication failed: %w", transport.ErrAuth)

// connect makes a sarama client: the dial, TLS handshake, SASL exchange
// and first metadata request against the brokers. It gives up at the
// connect timeout or when ctx ends, whichever comes first, abandoning the
// wait (sarama's constructor takes no context; each of its requests has
// its own read and write deadline, and a client made late is closed). Its
// errors name the brokers and the step.
func connect(ctx context.Context, brokers []string, sc *sarama.Config, cfg *config) (sarama.Client, error) {
	timeout := cfg.connectTimeout
	type result struct {
		c   sarama.Client
		err error
	}
	hosts := strings.Join(brokers, ",")
	ch := make(chan result, 1)
	go func() {
		c, err := sarama.NewClient(brokers, sc)
		ch <- result{c, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	abandon := func() {
		go func() {
			if r := <-ch; r.c != nil {
				_ = r.c.Close()
			}
		}()
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, connectError(hosts, sc, r.err, func() bool { return saslRefused(brokers, cfg) })
		}
		return r.c, nil
	case <-timer.C:
		abandon()
		return nil, fmt.Errorf("kafka: connect to %s: no answer within %s (ConnectTimeout) to the dial, %sor the metadata request: %w",
			hosts, timeout, steps(sc), context.DeadlineExceeded)
	case <-ctx.Done():
		abandon()
		return nil, fmt.Errorf("kafka: connect to %s: %w", hosts, ctx.Err())
	}
}

// steps names the handshakes a connection makes before its first request.
func steps(sc *sarama.Config) string {
	s := ""
	if sc.Net.TLS.Enable {
		s += "TLS handshake, "
	}
	if sc.Net.SASL.Enable {
		s += "SASL " + string(sc.Net.SASL.Mechanism) + " exchange, "
	}
	return s
}

// connectError says what failed of a connection to hosts: the
// credentials (wrapping [ErrAuth]), TLS, or reaching the brokers.
// refused tells, after the fact, whether a connection closed by the
// brokers was their refusal of the SASL exchange.
func connectError(hosts string, sc *sarama.Config, err error, refused func() bool) error {
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	auth := func(how string) error {
		return fmt.Errorf("kafka: connect to %s: %w: %s the SASL %s exchange (check the user and password): %w", hosts, ErrAuth, how, sc.Net.SASL.Mechanism, err)
	}
	switch {
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed), errors.Is(err, sarama.ErrIllegalSASLState),
		errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return auth("the brokers refused")
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return fmt.Errorf("kafka: connect to %s: TLS: the brokers' certificate is not trusted (tls_ca): %w", hosts, err)
	case sc.Net.SASL.Enable && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && refused():
		// Brokers before Kafka 1.0, and kfake, close the connection on
		// wrong credentials instead of answering; the probe showed that
		// the same brokers answer a connection that does not
		// authenticate.
		return auth("the brokers closed the connection during")
	}
	return fmt.Errorf("kafka: connect to %s (the dial, %sthe metadata request): %w", hosts, steps(sc), err)
}

// saslRefused reports whether one of brokers answers an ApiVersions
// request on a connection made as cfg's but without SASL: then a
// connection closed during the SASL exchange was a refusal of the
// credentials, not a broker down.
func saslRefused(brokers []string, cfg *config) bool {
	pc := cfg.baseConfig()
	pc.Net.SASL.Enable = false
	pc.Net.ReadTimeout, pc.Net.WriteTimeout = cfg.connectTimeout, cfg.connectTimeout
	for _, addr := range brokers {
		b := sarama.NewBroker(addr)
		if err := b.Open(pc); err != nil {
			continue
		}
		_, err := b.ApiVersions(&sarama.ApiVersionsRequest{})
		_ = b.Close()
		if err == nil {
			return true
		}
	}
	return false
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
