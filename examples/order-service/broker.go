package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
)

// consumers are the subscriptions of the example, by Router name.
var consumers = []string{"inventory", "email", "fraud", "analytics"}

// openTransport opens rawURL. On RabbitMQ it routes OrderPlaced with
// routing key "order.placed.<band>", so that fraud's queue is bound to
// high-value orders only and the broker filters.
func openTransport(ctx context.Context, rawURL string) (transport.Transport, error) {
	switch scheme(rawURL) {
	case "amqp", "amqps":
		return rabbitmq.New(ctx, rawURL, rabbitmq.RoutingKey(func(m *handler.Message) string {
			return "order.placed." + m.Headers[headerBand]
		}))
	}
	return transport.Open(ctx, rawURL)
}

func scheme(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme)
}

// topology is where a run's messages go: every name carries the shop, so
// runs never share a topic, group, queue or DLQ.
type topology struct {
	scheme string
	shop   string
	// fanOut is what the broker declares: whether each group receives
	// every message of a topic. Where it does not (a plain SQS queue is
	// one group), each consumer reads a queue of its own and the checkout
	// sends every event to each.
	fanOut bool
}

// fifo reports whether the broker keeps order only on FIFO queues and
// topics (SQS and SNS): there every name ends in ".fifo".
func (tp topology) fifo() bool { return tp.scheme == "sqs" || tp.scheme == "sns" }

// name returns base-shop, with ".fifo" where the broker needs it for order.
func (tp topology) name(base string) string {
	n := base + "-" + tp.shop
	if tp.fifo() {
		n += ".fifo"
	}
	return n
}

// topic is the topic OrderPlaced is published to.
func (tp topology) topic() string { return tp.name("orders") }

// destinations are the topics the checkout publishes each event to.
func (tp topology) destinations() []string {
	if tp.fanOut {
		return []string{tp.topic()}
	}
	out := make([]string, len(consumers))
	for i, c := range consumers {
		out[i] = tp.name("orders-" + c)
	}
	return out
}

// sub is the subscription of the consumer name: its group is name-shop.
func (tp topology) sub(name string) transport.Subscription {
	topic := tp.topic()
	if !tp.fanOut {
		topic = tp.name("orders-" + name)
	}
	return transport.Subscription{Topic: topic, Group: name + "-" + tp.shop, StartAtOldest: true, Options: tp.options(name)}
}

// replaySub is the subscription of analytics' replay: a new group from
// the oldest retained message.
func (tp topology) replaySub() transport.Subscription {
	return transport.Subscription{Topic: tp.sub("analytics").Topic, Group: "analytics-replay-" + tp.shop, StartAtOldest: true}
}

// options are the transport-specific options of a subscription: only
// fraud's filter, where the broker can filter.
func (tp topology) options(name string) map[string]string {
	if name != "fraud" {
		return nil
	}
	switch tp.scheme {
	case "amqp", "amqps":
		return map[string]string{"bind": "order.placed.high"}
	case "sns":
		return map[string]string{"filter_policy": `{"` + headerBand + `":["high"]}`}
	}
	return nil
}

// filtersFraud reports whether the broker filters fraud's messages.
func (tp topology) filtersFraud() bool { return tp.options("fraud") != nil }

// declare asks the transport what inventory's subscription would declare,
// before anything runs: the example needs each message's ID, Key and
// headers to arrive as published (dedupe keys on the ID, ordering and
// parking on the Key, fraud's filter reads a header), and it learns
// whether each group receives every message of a topic. A transport that
// cannot declare before subscribing is taken to fan out; the Router still
// checks its order at Run.
func declare(t transport.Transport, tp topology) (fanOut bool, err error) {
	d, ok := t.(transport.Declarer)
	if !ok {
		return true, nil
	}
	tp.fanOut = true
	sem, err := d.Declare(tp.sub("inventory"))
	if err != nil {
		return false, err
	}
	if !sem.Headers {
		return false, fmt.Errorf("%w: %s:// on this URL does not carry a message's ID, Key and headers (Semantics.Headers is false), "+
			"so dedupe, ordering and parking cannot work; use a URL that does (on MQTT, format=envelope)", transport.ErrInvalidOption, tp.scheme)
	}
	return sem.FanOut, nil
}

// cleanup removes what the run created on the broker and the broker would
// keep: topics, queues, streams, groups, sessions and DLQs. It returns
// what it did, for the summary. The memory transport keeps nothing.
func cleanup(ctx context.Context, t transport.Transport, rawURL string, tp topology, replayed bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var subs []transport.Subscription
	for _, c := range consumers {
		subs = append(subs, tp.sub(c))
	}
	subs = append(subs, tp.paymentSub())
	if replayed {
		subs = append(subs, tp.replaySub())
	}
	dlqs := make([]string, len(subs))
	for i, s := range subs {
		dlqs[i] = transport.DLQName(t, s)
	}
	var err error
	switch tr := t.(type) {
	case *redisstream.Transport:
		keys := append([]string{tp.topic(), tp.paymentTopic()}, dlqs...)
		err = tr.Client().Del(ctx, keys...).Err()
	case *rabbitmq.Transport:
		err = cleanRabbit(ctx, rawURL, []string{tp.topic(), tp.paymentTopic()}, subs)
	case *sqs.Transport:
		err = deleteQueues(ctx, tr.Client(), append(append(tp.destinations(), tp.paymentTopic()), dlqs...))
	case *sns.Transport:
		var queues []string
		for _, s := range subs {
			queues = append(queues, sns.QueueName(s.Topic, s.Group))
		}
		err = errors.Join(
			deleteTopics(ctx, tr, append([]string{tp.topic(), tp.paymentTopic()}, dlqs...)),
			deleteQueues(ctx, tr.SQS().Client(), append(queues, dlqs...)))
	case *jetstream.Transport:
		js := tr.JetStream()
		for _, subject := range append([]string{tp.topic(), tp.paymentTopic()}, dlqs...) {
			name, err2 := js.StreamNameBySubject(ctx, subject)
			if err2 != nil {
				continue // never made (a DLQ nothing was published to)
			}
			err = errors.Join(err, js.DeleteStream(ctx, name)) // and its consumers
		}
	case *mqtt.Transport:
		for _, id := range tr.Sessions() {
			err = errors.Join(err, tr.RemoveSession(ctx, id))
		}
	default:
		if tp.scheme == "kafka" {
			err = cleanKafka(rawURL, append([]string{tp.topic(), tp.paymentTopic()}, dlqs...), subs)
			break
		}
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("remove the run's broker resources: %w", err)
	}
	return "removed the run's topics, queues, groups and DLQs from the broker (-keep keeps them)", nil
}

// cleanRabbit deletes the exchanges of topics (and their delay queues)
// and, per subscription, the
// queue "<topic>.<group>", its DLQ and the exchanges that route to them
// (retry queues expire by themselves).
func cleanRabbit(ctx context.Context, rawURL string, topics []string, subs []transport.Subscription) error {
	conn, err := amqp.DialConfig(rawURL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return errors.New("rabbitmq: dial failed") // the error may quote the URL's password
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, s := range subs {
		q := s.Topic + "." + s.Group
		for _, name := range []string{q, rabbitmq.DLQName(q)} {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				return err // the channel is closed after an error
			}
		}
		for _, x := range []string{q + ".dlx", q + ".dlq", q + ".dlx.match", s.Group + transport.DLQSuffix} {
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				return err
			}
		}
	}
	for _, topic := range topics {
		// The payment deadlines' delay queue (rabbitmq.Transport.PublishAt)
		// and its auto-delete exchange.
		delay := topic + ".delay." + strconv.Itoa(int(PaymentWindow/time.Second)) + "s"
		if _, err := ch.QueueDelete(delay, false, false, false); err != nil {
			return err
		}
		if err := ch.ExchangeDelete(topic, false, false); err != nil {
			errs = append(errs, err)
			break // the channel is closed after an error
		}
	}
	return errors.Join(errs...)
}

// cleanKafka deletes the run's topics and consumer groups. It reaches the
// brokers of a plain kafka:// URL only; with SASL or TLS it leaves them.
func cleanKafka(rawURL string, topics []string, subs []transport.Subscription) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.User != nil || u.Query().Has("sasl") || u.Query().Has("tls") {
		return errors.New("kafka: only a plain URL's topics are removed")
	}
	cfg := sarama.NewConfig()
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = 10*time.Second, 10*time.Second, 10*time.Second
	cfg.Admin.Timeout = 10 * time.Second
	admin, err := sarama.NewClusterAdmin(strings.Split(u.Host, ","), cfg)
	if err != nil {
		return err
	}
	defer admin.Close()
	var errs []error
	for _, s := range subs {
		if err := admin.DeleteConsumerGroup(s.Group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
			errs = append(errs, err)
		}
	}
	for _, tp := range topics {
		if err := admin.DeleteTopic(tp); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func deleteQueues(ctx context.Context, c *awssqs.Client, names []string) error {
	var errs []error
	for _, n := range names {
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(n)})
		if err != nil {
			continue // never made (a DLQ nothing was published to)
		}
		if _, err := c.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func deleteTopics(ctx context.Context, t *sns.Transport, names []string) error {
	var errs []error
	for _, n := range names {
		arn, err := t.TopicARN(ctx, n)
		if err != nil {
			continue
		}
		if _, err := t.Client().DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(arn)}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
