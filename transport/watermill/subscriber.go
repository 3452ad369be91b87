package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/transport"
)

// A Subscriber is a Watermill message.Subscriber that reads from a Ferry
// transport, made by [NewSubscriber]: Watermill handlers (a Watermill
// Router's, or any reader of the channel) run over Ferry's transports
// unchanged. It may be used concurrently.
//
// Each Subscribe opens one Ferry stream of the subscription template's
// group and hands its messages out on the returned channel under Ferry's
// per-key order: a message whose Key has an earlier message handed out and
// not yet acked waits until that one is acked, while messages of other keys
// (and keyless ones) go out meanwhile, up to the template's MaxInFlight
// ([DefaultSubscriberInFlight] when 0) unsettled at once. So a Watermill
// Router, which handles each message of the channel in a goroutine of its
// own, runs different keys concurrently and one key's messages one after
// another, in the order the stream delivers them (publish order, where the
// stream's Semantics keep order).
//
// Ack acks the Ferry delivery, then releases the key's next message. Nack
// hands the same message out again after [ResendDelay], in process: the
// key stays busy and the delivery unsettled, so order holds, and the broker
// redelivers it only if the process goes away. A message's context is
// cancelled once it is acked or nacked, or its subscription ends.
type Subscriber struct {
	s    transport.Subscriber
	tmpl transport.Subscription
	cfg  config
	max  int

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Watermill Subscriber that reads from s. tmpl is
// the template of every Subscription it opens: Group (Watermill's consumer
// group), Consumer, StartAtOldest, MaxInFlight and Options as the Ferry
// transport documents them; its Topic must be empty, since each Subscribe
// names its topic. Options: [WithLogger], [KeyField], [Timeout],
// [ResendDelay]. An invalid option returns an error wrapping
// [transport.ErrInvalidOption] that names it. The Subscriber does not own
// s: its Close closes the streams it opened and leaves s open.
func NewSubscriber(s transport.Subscriber, tmpl transport.Subscription, opts ...Option) (*Subscriber, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: watermill: NewSubscriber: nil transport.Subscriber", transport.ErrInvalidOption)
	}
	if tmpl.Topic != "" {
		return nil, fmt.Errorf("%w: watermill: NewSubscriber: the template has Topic %q; each Subscribe names its topic",
			transport.ErrInvalidOption, tmpl.Topic)
	}
	if tmpl.MaxInFlight < 0 {
		return nil, fmt.Errorf("%w: watermill: NewSubscriber: MaxInFlight %d is negative", transport.ErrInvalidOption, tmpl.MaxInFlight)
	}
	cfg, err := newConfig(sideSubscriber, opts)
	if err != nil {
		return nil, err
	}
	max := tmpl.MaxInFlight
	if max == 0 {
		max = DefaultSubscriberInFlight
	}
	return &Subscriber{s: s, tmpl: tmpl, cfg: cfg, max: max, subs: make(map[*subscription]struct{})}, nil
}

// Subscribe opens a Ferry stream of topic with the template and returns the
// channel of its messages. The opening is bounded by ctx and [Timeout]; the
// group exists at the broker when Subscribe returns (Ferry's Subscribe
// contract). When ctx is cancelled or the Subscriber closes, the
// subscription ends: the contexts of the messages handed out are
// cancelled, the stream closes (releasing what was not acked, for
// redelivery) and the channel is closed.
func (w *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("watermill: subscribe %s: %w", topic, errClosedSubscriber)
	}
	sub := w.tmpl
	sub.Topic = topic
	sub.MaxInFlight = w.max
	octx, cancel := context.WithTimeout(ctx, w.cfg.timeout)
	st, err := w.s.Subscribe(octx, sub)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("watermill: subscribe %s: %w", topic, err)
	}
	x := &subscription{
		w:     w,
		st:    st,
		topic: topic,
		out:   make(chan *message.Message),
		room:  make(chan struct{}, 1),
		keys:  make(map[string][]transport.Delivery),
		done:  make(chan struct{}),
	}
	x.ctx, x.cancel = context.WithCancel(ctx)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		x.cancel()
		cctx, cancel := context.WithTimeout(context.Background(), w.cfg.timeout)
		_ = st.Close(cctx)
		cancel()
		return nil, fmt.Errorf("watermill: subscribe %s: %w", topic, errClosedSubscriber)
	}
	w.subs[x] = struct{}{}
	w.mu.Unlock()
	go x.run()
	return x.out, nil
}

// SubscribeInitialize opens a stream of topic with the template and closes
// it at once, so that the group exists at the broker and receives what is
// published from then on (Watermill's SubscribeInitializer). It is bounded
// by [Timeout].
func (w *Subscriber) SubscribeInitialize(topic string) error {
	sub := w.tmpl
	sub.Topic = topic
	sub.MaxInFlight = w.max
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.timeout)
	defer cancel()
	st, err := w.s.Subscribe(ctx, sub)
	if err != nil {
		return fmt.Errorf("watermill: subscribe-initialize %s: %w", topic, err)
	}
	if err := st.Close(ctx); err != nil {
		return fmt.Errorf("watermill: subscribe-initialize %s: %w", topic, err)
	}
	return nil
}

// Close ends every subscription (see Subscribe) and waits until their
// channels are closed, each stream's Close bounded by [Timeout]. Later
// Subscribe calls return an error. Closing twice returns nil.
func (w *Subscriber) Close() error {
	w.mu.Lock()
	w.closed = true
	subs := make([]*subscription, 0, len(w.subs))
	for x := range w.subs {
		subs = append(subs, x)
	}
	w.mu.Unlock()
	var errs []error
	for _, x := range subs {
		x.cancel()
	}
	for _, x := range subs {
		<-x.done
		errs = append(errs, x.closeErr)
	}
	return errors.Join(errs...)
}

// subscription is one Subscribe call: a pump that receives from the Ferry
// stream (this file's run) and one carrier goroutine per busy key
// (carrier.go) that hands the key's messages out one after another.
type subscription struct {
	w      *Subscriber
	st     transport.Stream
	topic  string
	ctx    context.Context // ends the subscription
	cancel context.CancelFunc
	out    chan *message.Message
	room   chan struct{} // a settle made room under the in-flight bound

	mu   sync.Mutex
	held int                             // received from the stream, not settled
	keys map[string][]transport.Delivery // busy keys, with the deliveries waiting behind them

	carriers sync.WaitGroup
	done     chan struct{} // closed once the channel is closed
	closeErr error         // the stream's Close; read after done
}

// run is the pump: it receives from the stream while fewer than the bound
// are unsettled, and gives each delivery to a carrier, or queues it behind
// its busy key. It ends the subscription when its context ends or the
// stream stops.
func (x *subscription) run() {
	defer x.shutdown()
	var backoff time.Duration
	for {
		for !x.hasRoom() {
			select {
			case <-x.room:
			case <-x.ctx.Done():
				return
			}
		}
		d, err := x.st.Receive(x.ctx)
		if err != nil {
			if x.ctx.Err() != nil {
				return
			}
			if errors.Is(err, transport.ErrClosed) {
				x.w.cfg.log.Error("watermill: the Ferry stream closed under the subscription", "topic", x.topic, "err", err)
				return
			}
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			x.w.cfg.log.Warn("watermill: receive failed; retrying", "topic", x.topic, "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-x.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		key := d.Message().Key
		x.mu.Lock()
		x.held++
		if key != "" {
			if q, busy := x.keys[key]; busy {
				x.keys[key] = append(q, d)
				x.mu.Unlock()
				continue
			}
			x.keys[key] = nil
		}
		x.mu.Unlock()
		x.carriers.Add(1)
		go x.carry(d)
	}
}

func (x *subscription) hasRoom() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.held < x.w.max
}

// shutdown ends the subscription once the pump has returned: it cancels the
// context (and so every message's), waits for the carriers, closes the
// stream, which releases every unsettled delivery to the broker, and closes
// the channel.
func (x *subscription) shutdown() {
	x.cancel()
	x.carriers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), x.w.cfg.timeout)
	if err := x.st.Close(ctx); err != nil {
		x.closeErr = fmt.Errorf("watermill: close the stream of %s: %w", x.topic, err)
	}
	cancel()
	close(x.out)
	x.w.mu.Lock()
	delete(x.w.subs, x)
	x.w.mu.Unlock()
	close(x.done)
}
