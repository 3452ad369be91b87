package outbox

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
)

// Defaults of the relay, each overridden by the option of the same name.
const (
	DefaultBatchSize       = 256
	DefaultPollInterval    = time.Second
	DefaultPublishTimeout  = 30 * time.Second
	DefaultRetention       = time.Hour
	DefaultCleanupInterval = time.Minute
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = time.Minute
	DefaultStatsInterval   = 10 * time.Second
)

// An Option configures [New]. Options are made by the functions of this
// package; the interfaces are sealed. [Table] configures both [New] and
// [NewRelay].
type Option interface{ applyOutbox(*config) }

// A RelayOption configures [NewRelay].
type RelayOption interface{ applyRelay(*config) }

// A CommonOption configures both [New] and [NewRelay]: [Table].
type CommonOption interface {
	Option
	RelayOption
}

type config struct {
	table  string
	notify bool

	batchSize       int
	pollInterval    time.Duration
	publishTimeout  time.Duration
	retention       time.Duration
	cleanupInterval time.Duration
	minBackoff      time.Duration
	maxBackoff      time.Duration
	statsInterval   time.Duration
	listen          bool

	onPublished    func(n int)
	onPublishError func(m *handler.Message, attempt int, err error)
	onStats        func(Stats)
	logger         *slog.Logger
	tel            *telemetry.Telemetry
	telSet         bool
}

func defaultConfig() config {
	return config{
		table: DefaultTable, notify: true, listen: true,
		batchSize: DefaultBatchSize, pollInterval: DefaultPollInterval,
		publishTimeout: DefaultPublishTimeout, retention: DefaultRetention,
		cleanupInterval: DefaultCleanupInterval, minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff, statsInterval: DefaultStatsInterval,
		logger: slog.Default(),
	}
}

// validate checks the options that New (relay false) or NewRelay (relay
// true) takes.
func (c *config) validate(relay bool) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: outbox: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	if err := checkTable(c.table); err != nil {
		return err
	}
	if c.telSet && c.tel == nil {
		return fail("WithTelemetry(nil)")
	}
	if !relay {
		return nil
	}
	switch {
	case c.batchSize < 1:
		return fail("BatchSize(%d): want at least 1", c.batchSize)
	case c.pollInterval < time.Millisecond:
		return fail("PollInterval(%s): want at least 1ms", c.pollInterval)
	case c.publishTimeout < time.Millisecond:
		return fail("PublishTimeout(%s): want at least 1ms", c.publishTimeout)
	case c.retention < 0:
		return fail("Retention(%s): want 0 or more", c.retention)
	case c.cleanupInterval < 0:
		return fail("CleanupInterval(%s): want 0 (off) or more", c.cleanupInterval)
	case c.minBackoff <= 0 || c.maxBackoff < c.minBackoff:
		return fail("Backoff(%s, %s): want 0 < min <= max", c.minBackoff, c.maxBackoff)
	case c.statsInterval < 0:
		return fail("OnStats(%s): want 0 (default) or more", c.statsInterval)
	case c.logger == nil:
		return fail("WithLogger(nil)")
	}
	return nil
}

type bothOption func(*config)

func (o bothOption) applyOutbox(c *config) { o(c) }
func (o bothOption) applyRelay(c *config)  { o(c) }

type outboxOption func(*config)

func (o outboxOption) applyOutbox(c *config) { o(c) }

type relayOption func(*config)

func (o relayOption) applyRelay(c *config) { o(c) }

// Table sets the outbox table, overriding "ferry_outbox" ([DefaultTable]),
// for [New] and [NewRelay] alike: give both the same. name is "table" or
// "schema.table" in lower case; create it with [Migrate].
func Table(name string) CommonOption {
	return bothOption(func(c *config) { c.table = name })
}

// WithTelemetry instruments the outbox with t (package telemetry), given
// to [New] and [NewRelay] alike:
//
//   - [Outbox.Add] makes a "create <topic>" span per message, child of the
//     span in its ctx (the transaction that writes the row), and stores
//     its context with the row as the traceparent (and tracestate) header.
//   - The relay makes a "relay <topic>" span per row it publishes, child of
//     the row's stored context, and publishes through t.Publisher(pub), so
//     that the "send <topic>" span is the relay span's child and the
//     consumer's "process <topic>" span the send span's: one trace from the
//     insert to each handler.
//   - The relay exports the table's gauges (ferry_outbox_pending_messages,
//     ferry_outbox_failing_messages, ferry_outbox_lag_seconds: the age of
//     the oldest pending row), read every [OnStats] interval (10s by
//     default) whether or not OnStats is given, and counts
//     ferry_outbox_published_total, ferry_outbox_publish_errors_total and
//     the time from insert to confirmed publish
//     (ferry_outbox_relay_delay_seconds).
//
// The package-level [Add] and [AddSQL] write through an Outbox without
// telemetry: make one with New(WithTelemetry(t)) to trace the insert.
func WithTelemetry(t *telemetry.Telemetry) CommonOption {
	return bothOption(func(c *config) { c.tel, c.telSet = t, true })
}

// NoNotify stops [Outbox.Add] from queuing a NOTIFY with each transaction.
// The default notifies, so that relays wake within milliseconds of a
// commit; PostgreSQL serialises the commits of notifying transactions on
// one queue lock, which only matters at thousands of commits a second.
// Without it relays find new rows by polling ([PollInterval]).
func NoNotify() Option {
	return outboxOption(func(c *config) { c.notify = false })
}

// NoListen stops the relay from LISTENing for the outbox's notifications;
// it then finds new rows by polling alone. The default listens on one
// dedicated connection taken from the pool.
func NoListen() RelayOption {
	return relayOption(func(c *config) { c.listen = false })
}

// BatchSize sets how many rows one claim takes, overriding 256
// ([DefaultBatchSize]). n must be at least 1. The rows are published with
// [transport.PublishBatch] in waves: wave i holds the i-th claimed row of
// every claimed key, so a batch of many keys publishes in few waves.
func BatchSize(n int) RelayOption {
	return relayOption(func(c *config) { c.batchSize = n })
}

// PollInterval sets how often an idle relay looks for rows without being
// notified, overriding 1s ([DefaultPollInterval]). It bounds the latency
// when notifications are off or lost, and how late a row whose publish
// failed is retried after its backoff. d must be at least 1ms.
func PollInterval(d time.Duration) RelayOption {
	return relayOption(func(c *config) { c.pollInterval = d })
}

// PublishTimeout bounds each wave's publish, overriding 30s
// ([DefaultPublishTimeout]). A publish still unconfirmed then ends with
// an unknown outcome: the row stays pending and is published again, with
// the same ID. The claim's transaction stays open meanwhile, so keep it
// well under the database's idle_in_transaction_session_timeout. d must be
// at least 1ms.
func PublishTimeout(d time.Duration) RelayOption {
	return relayOption(func(c *config) { c.publishTimeout = d })
}

// Retention sets how long published rows are kept (marked with
// published_at) before the relay deletes them, overriding 1h
// ([DefaultRetention]). 0 deletes each row in the transaction that marks it
// published. Kept rows let operators see what was sent, and republish it
// by clearing published_at.
func Retention(d time.Duration) RelayOption {
	return relayOption(func(c *config) { c.retention = d })
}

// CleanupInterval sets how often the relay deletes published rows past
// their retention, overriding 1m ([DefaultCleanupInterval]); 0 turns the
// cleanup off (run [Relay.Cleanup] yourself).
func CleanupInterval(d time.Duration) RelayOption {
	return relayOption(func(c *config) { c.cleanupInterval = d })
}

// Backoff sets the delay before a row whose publish failed is tried again:
// min after the first failure, doubling with each further failure up to
// max, overriding 100ms and 1m. The row's later rows of the same key wait
// behind it. 0 < min <= max.
func Backoff(min, max time.Duration) RelayOption {
	return relayOption(func(c *config) { c.minBackoff, c.maxBackoff = min, max })
}

// OnPublished calls fn after each claim with the number of rows whose
// publish was confirmed and marked. fn runs on the relay's goroutine: keep
// it short. The default does nothing.
func OnPublished(fn func(n int)) RelayOption {
	return relayOption(func(c *config) { c.onPublished = fn })
}

// OnPublishError calls fn for each row whose publish failed, with the
// message, the attempt that failed (1 for the first) and the error (it
// wraps [transport.ErrUnknownOutcome] when the broker may have the
// message). The row stays pending and is tried again after its backoff.
// fn runs on the relay's goroutine and must not keep m. The default logs
// at warning level through the relay's logger ([WithLogger]).
func OnPublishError(fn func(m *handler.Message, attempt int, err error)) RelayOption {
	return relayOption(func(c *config) { c.onPublishError = fn })
}

// OnStats calls fn with the outbox's [Stats] every interval (0 means 10s,
// [DefaultStatsInterval]) while the relay runs: the metrics hook for
// pending rows and the age of the oldest. Every relay of a table reports
// the same table-wide figures; export them from one. The default does
// nothing and runs no query.
func OnStats(interval time.Duration, fn func(Stats)) RelayOption {
	return relayOption(func(c *config) {
		if interval != 0 {
			c.statsInterval = interval
		}
		c.onStats = fn
	})
}

// WithLogger sets the relay's logger, overriding slog.Default(). The relay
// logs a failed claim, cleanup or stats query and a lost LISTEN connection
// (warn), each failed publish unless [OnPublishError] is set (warn), and
// what each cleanup deleted (debug). An [Outbox] has no logger: its one
// operation, Add, returns its errors.
func WithLogger(l *slog.Logger) RelayOption {
	return relayOption(func(c *config) { c.logger = l })
}
