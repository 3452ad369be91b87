package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	wmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/watermill"
)

type config struct {
	url     string
	topic   string
	orders  int
	timeout time.Duration
}

// OrderPlaced is the event Ferry publishes.
type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Items   int    `json:"items"`
}

// shipping is a Watermill handler, as a team would have written it before
// Ferry: it decodes the payload and reads the metadata.
func shipping(say func(string, ...any)) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		var o OrderPlaced
		if err := json.Unmarshal(msg.Payload, &o); err != nil {
			return err
		}
		say("shipping: label for %s (%d items; event %s, key %s, type %s)",
			o.OrderID, o.Items, msg.UUID, msg.Metadata.Get(watermill.DefaultKeyField), msg.Metadata.Get("type"))
		return nil
	}
}

// run publishes cfg.orders OrderPlaced events with Ferry and handles them
// with the Watermill handler until each was handled once.
func run(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger) error {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, err := transport.Open(octx, cfg.url)
	if err != nil {
		return err
	}
	defer t.Close(context.WithoutCancel(ctx))
	fmt.Fprintf(out, "transport: %s, stream %s\n", transport.RedactString(cfg.url), cfg.topic)

	// The Watermill side: a Subscriber over the Ferry transport, in the
	// consumer group "shipping", which starts at the oldest message.
	sub, err := watermill.NewSubscriber(t, transport.Subscription{Group: "shipping", StartAtOldest: true},
		watermill.WithLogger(logger))
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		handled = map[string]int{}
		all     = make(chan struct{})
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	counted := func(next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			if err := next(msg); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			handled[msg.UUID]++
			if len(handled) == cfg.orders {
				select {
				case <-all:
				default:
					close(all)
				}
			}
			return nil
		}
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, nil)
	if err != nil {
		return err
	}
	r.AddMiddleware(wmiddleware.Recoverer)
	r.AddConsumerHandler("shipping", cfg.topic, sub, counted(shipping(say)))
	go func() { _ = r.Run(context.WithoutCancel(ctx)) }()
	defer r.Close()
	<-r.Running()

	// The Ferry side publishes.
	for n := 1; n <= cfg.orders; n++ {
		o := OrderPlaced{OrderID: fmt.Sprintf("order-%04d", n), Items: 1 + n%3}
		body, _ := json.Marshal(o)
		m := &handler.Message{ID: "evt-" + o.OrderID, Key: o.OrderID, Topic: cfg.topic, Payload: body,
			Headers: map[string]string{"type": "OrderPlaced"}}
		if err := t.Publish(ctx, m); err != nil {
			return fmt.Errorf("publish %s: %w", m.ID, err)
		}
	}
	select {
	case <-all:
	case <-time.After(cfg.timeout):
		return fmt.Errorf("handled %d of %d orders within %v", len(handled), cfg.orders, cfg.timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(200 * time.Millisecond) // nothing more may come
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			return fmt.Errorf("%s handled %d times", id, n)
		}
	}
	fmt.Fprintf(out, "handled %d orders, each once\n", len(handled))
	return nil
}
