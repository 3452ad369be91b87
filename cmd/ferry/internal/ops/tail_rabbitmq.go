package ops

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// tailRabbitMQ follows topic's exchange through a queue of its own:
// server-named, exclusive and auto-deleted, so it disappears with the
// connection and takes nothing from the consumers' queues. rawURL is the
// URL the transport was opened with (its Ferry options are dropped).
func tailRabbitMQ(ctx context.Context, rawURL, topic string, ready func(), fn func(*handler.Message) error) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%w: cannot parse the broker URL", ErrUsage)
	}
	u.RawQuery = ""
	conn, err := amqp.DialConfig(u.String(), amqp.Config{Dial: amqp.DefaultDial(DefaultTimeout)})
	if err != nil {
		return fmt.Errorf("tail %s: connect to %s: %s", topic, transport.RedactString(rawURL), scrub(err, rawURL))
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("tail %s: %w", topic, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-queue-type": "classic"})
	if err != nil {
		return fmt.Errorf("tail %s: declare the tail's queue: %w", topic, err)
	}
	if err := ch.QueueBind(q.Name, "#", topic, false, nil); err != nil {
		return fmt.Errorf("tail %s: bind to exchange %q (is it declared? a publish or a subscription declares it): %w", topic, topic, err)
	}
	ds, err := ch.ConsumeWithContext(ctx, q.Name, "ferry-tail", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("tail %s: %w", topic, err)
	}
	if ready != nil {
		ready()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("tail %s: the broker closed the tail's channel", topic)
			}
			m := &handler.Message{ID: d.MessageId, Topic: topic, Payload: d.Body, Headers: map[string]string{}}
			for k, v := range d.Headers {
				if strings.HasPrefix(k, "x-ferry-") {
					continue
				}
				m.Headers[k] = fmt.Sprint(v)
			}
			m.Key = m.Headers[transport.HeaderKey]
			delete(m.Headers, transport.HeaderKey)
			if m.Key == "" {
				m.Key = d.RoutingKey
			}
			if m.ID == "" {
				m.ID = m.Headers[transport.HeaderID]
			}
			if !d.Timestamp.IsZero() {
				m.SetFacts(handler.Facts{PublishedAt: d.Timestamp, ReceivedAt: time.Now()})
			}
			if err := fn(m); err != nil {
				return err
			}
		}
	}
}
