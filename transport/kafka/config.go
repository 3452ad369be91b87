package kafka

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// config is a Transport's configuration: the defaults, then the URL's
// settings, then the typed Options, checked once in parse.
type config struct {
	clientID        string
	version         sarama.KafkaVersion
	group           string
	partitioner     Partitioning
	compression     sarama.CompressionCodec
	linger          time.Duration
	deliveryTimeout time.Duration
	maxPayload      int
	start           Position
	balance         Balance
	window          int
	revokeTimeout   time.Duration
	sessionTimeout  time.Duration
	heartbeat       time.Duration
	commitInterval  time.Duration
	tls             *tls.Config
	saslMech        SASLMechanism
	saslUser        string
	saslPass        string
	plaintextAuth   bool
	connectTimeout  time.Duration
	publishWindow   int
	logger          *slog.Logger
	err             error
}

func defaultConfig() config {
	v, _ := sarama.ParseKafkaVersion(defaultKafkaVer)
	return config{
		clientID:        defaultClientID,
		version:         v,
		partitioner:     Murmur2,
		compression:     sarama.CompressionNone,
		deliveryTimeout: DefaultDeliveryTimeout,
		maxPayload:      DefaultMaxPayload,
		start:           Latest,
		balance:         Range,
		window:          0, // 0: Subscription.MaxInFlight, else DefaultWindow
		revokeTimeout:   DefaultRevokeTimeout,
		sessionTimeout:  DefaultSessionTimeout,
		heartbeat:       DefaultHeartbeat,
		commitInterval:  DefaultCommitInterval,
		connectTimeout:  DefaultConnectTimeout,
		publishWindow:   DefaultPublishWindow,
		logger:          slog.Default(),
	}
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: kafka: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// check reports the first bad option, or a bad combination of them.
func (c *config) check() error {
	if c.err == nil && c.heartbeat*3 > c.sessionTimeout {
		c.fail("Heartbeat(%s) must be at most a third of SessionTimeout(%s)", c.heartbeat, c.sessionTimeout)
	}
	return c.err
}

// semantics is what every stream of c declares; see the package
// documentation's "Delivery semantics".
func (c *config) semantics() transport.Semantics {
	return transport.Semantics{
		Transport:       Scheme,
		Ordering:        transport.OrderPerKey,
		Ack:             transport.AckOffset,
		Redelivery:      transport.RedeliverOnNack,
		NackDelay:       true,
		Attempts:        false,
		FanOut:          true,
		Replay:          true,
		Headers:         true,
		MaxPayload:      c.maxPayload,
		RedeliveryDelay: c.sessionTimeout + c.heartbeat,
	}
}

// baseConfig is the sarama configuration shared by producers, consumers
// and admin requests: version, client ID, TLS and SASL.
func (c *config) baseConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = c.version
	sc.ClientID = c.clientID
	sc.Net.DialTimeout = c.connectTimeout
	sc.Metadata.Timeout = c.connectTimeout
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

// maxRecord is the producer's Producer.MaxMessageBytes: 1 MiB, or
// MaxPayload plus 32 KiB for the key and headers when that is larger. It
// caps a record batch of one partition, framing included; Publish refuses
// a record that would not fit in one alone.
func (c *config) maxRecord() int { return max(1<<20, c.maxPayload+32<<10) }

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
	sc.Producer.MaxMessageBytes = c.maxRecord()
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
