package telemetry

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The instruments' names. They are spelled the Prometheus way, with
// underscores, so that the OpenTelemetry Prometheus exporter gives the
// name in the comment whatever its escaping (the unit "s" adds _seconds, a
// counter adds _total); docs/observability.md lists them with their
// labels.
const (
	nameInfo          = "ferry_subscription_info"        // ferry_subscription_info
	nameReceived      = "ferry_messages_received"        // ferry_messages_received_total
	nameSettled       = "ferry_messages_settled"         // ferry_messages_settled_total
	nameAbandoned     = "ferry_messages_abandoned"       // ferry_messages_abandoned_total
	nameErrors        = "ferry_handler_errors"           // ferry_handler_errors_total
	nameRetries       = "ferry_handler_retries"          // ferry_handler_retries_total
	nameHandlerDur    = "ferry_handler_duration"         // ferry_handler_duration_seconds
	nameQueueTime     = "ferry_queue_time"               // ferry_queue_time_seconds
	nameInFlight      = "ferry_messages_in_flight"       // ferry_messages_in_flight
	nameDelayed       = "ferry_messages_delayed"         // ferry_messages_delayed
	nameRunning       = "ferry_handler_calls_running"    // ferry_handler_calls_running
	nameStuck         = "ferry_handler_calls_stuck"      // ferry_handler_calls_stuck
	nameBacklog       = "ferry_key_backlog_messages"     // ferry_key_backlog_messages
	nameBacklogMax    = "ferry_key_backlog_max_messages" // ferry_key_backlog_max_messages
	nameLagMessages   = "ferry_consumer_lag_messages"    // ferry_consumer_lag_messages
	nameLagSeconds    = "ferry_consumer_lag"             // ferry_consumer_lag_seconds
	nameDLQ           = "ferry_dlq_messages"             // ferry_dlq_messages
	nameParkedKeys    = "ferry_parked_keys"              // ferry_parked_keys
	nameParkedAge     = "ferry_parked_oldest_age"        // ferry_parked_oldest_age_seconds
	namePublished     = "ferry_messages_published"       // ferry_messages_published_total
	namePublishDur    = "ferry_publish_duration"         // ferry_publish_duration_seconds
	nameOutboxPending = "ferry_outbox_pending_messages"  // ferry_outbox_pending_messages
	nameOutboxFailing = "ferry_outbox_failing_messages"  // ferry_outbox_failing_messages
	nameOutboxLag     = "ferry_outbox_lag"               // ferry_outbox_lag_seconds
	nameOutboxPub     = "ferry_outbox_published"         // ferry_outbox_published_total
	nameOutboxErrors  = "ferry_outbox_publish_errors"    // ferry_outbox_publish_errors_total
	nameOutboxDelay   = "ferry_outbox_relay_delay"       // ferry_outbox_relay_delay_seconds
)

// The metric labels. No label ever holds a message ID or key: each has a
// bounded set of values, fixed by the program's configuration.
const (
	labelSubscription = "subscription" // the name given to Router.Add
	labelGroup        = "group"        // the consumer group
	labelTopic        = "topic"        // the subscription's topic (filter) on ferry_subscription_info, or the published topic
	labelTransport    = "transport"    // the transport's scheme
	labelOutcome      = "outcome"      // see Outcome; for publishes ok, error, unknown
	labelClass        = "class"        // handler.Class of the error ("ok" for none)
	labelPartition    = "partition"    // partition, shard or queue of a lag entry
	labelDLQ          = "dlq"          // the DLQ's name
	labelTable        = "table"        // the outbox table
	labelRetry        = "retry"        // how a retry happens: in-process, broker, hold, redeliver
)

// Bucket boundaries, in seconds.
var (
	// handler calls and publishes: 100µs to 1 minute.
	durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// time in queue and in the outbox: 1ms to 1 hour.
	queueBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
		10, 30, 60, 300, 900, 3600}
)

type instruments struct {
	abandoned, errors, retries metric.Int64Counter
	received, settled          metric.Int64ObservableCounter
	handlerDur, queueTime      metric.Float64Histogram
	published                  metric.Int64Counter
	publishDur                 metric.Float64Histogram
	outboxPub, outboxErrors    metric.Int64Counter
	outboxDelay                metric.Float64Histogram

	info, inFlight, delayed, running, stuck, backlog, backlogMax metric.Int64ObservableGauge
	lagMessages, dlq, parkedKeys                                 metric.Int64ObservableGauge
	lagSeconds, parkedAge                                        metric.Float64ObservableGauge
	outboxPending, outboxFailing                                 metric.Int64ObservableGauge
	outboxLag                                                    metric.Float64ObservableGauge
}

func (in *instruments) init(m metric.Meter) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	fgauge := func(name, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	var err error
	in.received, err = m.Int64ObservableCounter(nameReceived, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries received by a subscription (a broker's redelivery counts again)."))
	errs = append(errs, err)
	in.settled, err = m.Int64ObservableCounter(nameSettled, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries settled, by outcome: ack, nack, dead_letter, parked, duplicate."))
	errs = append(errs, err)
	in.abandoned = counter(nameAbandoned, "{message}", "Deliveries left unsettled by a shutdown's drain deadline, for the broker to redeliver.")
	in.errors = counter(nameErrors, "{error}", "Failed handler attempts, by error class.")
	in.retries = counter(nameRetries, "{retry}", "Retries scheduled after a failed attempt, by how they happen.")
	in.handlerDur = hist(nameHandlerDur, "Duration of one handler call by the Router (the whole chain), by error class.", durationBuckets)
	in.queueTime = hist(nameQueueTime, "Time from the broker accepting a message to its first handler call.", queueBuckets)
	in.published = counter(namePublished, "{message}", "Messages published, by outcome: ok, error, unknown (the broker may have it).")
	in.publishDur = hist(namePublishDur, "Duration of one publish, until the broker confirmed it.", durationBuckets)
	in.outboxPub = counter(nameOutboxPub, "{message}", "Outbox rows whose publish the broker confirmed, by this process's relays.")
	in.outboxErrors = counter(nameOutboxErrors, "{error}", "Failed publishes of outbox rows by this process's relays.")
	in.outboxDelay = hist(nameOutboxDelay, "Time from an outbox row's insert to its publish being confirmed.", queueBuckets)

	in.info = gauge(nameInfo, "", "1 for each running subscription, with its topic and transport as labels: join on subscription.")
	in.inFlight = gauge(nameInFlight, "{message}", "Deliveries held unsettled by a subscription (running, waiting behind their key, or held for a retry delay).")
	in.delayed = gauge(nameDelayed, "{message}", "Deliveries the Router holds in process for a retry delay.")
	in.running = gauge(nameRunning, "{call}", "Handler calls running now.")
	in.stuck = gauge(nameStuck, "{call}", "Handler calls running longer than the Router's StuckAfter; each stalls its key.")
	in.backlog = gauge(nameBacklog, "{message}", "Deliveries waiting behind a busy key (per-key order).")
	in.backlogMax = gauge(nameBacklogMax, "{message}", "The longest wait list of any one key.")
	in.lagMessages = gauge(nameLagMessages, "{message}", "Messages of the group's partition not yet consumed (or not yet acked), from the transport's LagReporter.")
	in.lagSeconds = fgauge(nameLagSeconds, "Age of the oldest message of the group's partition not yet consumed; absent where the broker cannot tell while it lags.")
	in.dlq = gauge(nameDLQ, "{message}", "Messages in the subscription's DLQ, counted up to 1000, on transports whose DLQ can be read without consuming it.")
	in.parkedKeys = gauge(nameParkedKeys, "{key}", "Keys parked on the subscription.")
	in.parkedAge = fgauge(nameParkedAge, "How long the oldest parked key of the subscription has been parked; 0 when none.")
	in.outboxPending = gauge(nameOutboxPending, "{message}", "Outbox rows not yet published.")
	in.outboxFailing = gauge(nameOutboxFailing, "{message}", "Pending outbox rows whose last publish failed; each blocks its key.")
	in.outboxLag = fgauge(nameOutboxLag, "Age of the oldest pending outbox row; 0 when none.")
	return errors.Join(errs...)
}

// labels is one set of labels as the options of each kind of measurement,
// built once: passing a prebuilt slice to Add or Record allocates nothing.
type labels struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func labelsOf(kv ...attribute.KeyValue) labels {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return labels{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
}
