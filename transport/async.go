package transport

import (
	"context"
	"fmt"
	"sync"

	"github.com/ferrymq/ferry/handler"
)

// An AsyncPublisher pipelines publishes from one caller: it keeps a bounded
// window of messages in flight to the broker, each with its own result, so
// that one goroutine can keep the broker's confirm window full (sarama's
// AsyncProducer, franz-go's promise, amqp091's deferred confirmations). It is
// optional; [Pipeline] gives any Publisher the same API.
//
// PublishAsync hands m to the window and returns once it is accepted; done
// is called exactly once, later, with m's own result under [Publisher]'s
// rules: nil when the broker confirmed it, an error wrapping
// [ErrUnknownOutcome] when it may have been written, another error when it
// was not. While the window is full PublishAsync blocks (backpressure) until
// room frees up or ctx ends; it then returns an error wrapping ctx.Err() and
// m was not accepted (done is not called). After Close it returns an error
// wrapping [ErrClosed].
//
// Messages of one caller are written in the order PublishAsync accepted
// them, so per-key order holds for keys published from one goroutine. The
// caller must not modify m until done is called; done runs on a goroutine of
// the transport and must not block. ctx bounds only the wait for room: a
// message accepted is published whatever becomes of ctx, bounded by the
// transport's own publish deadline.
//
// Flush waits until every message accepted before the call has had its done
// called, or ctx ends.
type AsyncPublisher interface {
	PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error
	Flush(ctx context.Context) error
}

// DefaultWindow is the window of a [Pipeline] made with window 0.
const DefaultWindow = 256

// Pipeline returns p's own AsyncPublisher if it has one; otherwise an
// AsyncPublisher over p that runs up to window Publish calls at once (0
// means [DefaultWindow]). The fallback keeps each message's own result, but
// not the order of concurrent Publish calls: for per-key order across a
// window, use a transport that implements AsyncPublisher natively (each
// transport's page says whether it does).
func Pipeline(p Publisher, window int) AsyncPublisher {
	if ap, ok := p.(AsyncPublisher); ok {
		return ap
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return &pipeline{p: p, room: make(chan struct{}, window)}
}

type pipeline struct {
	p    Publisher
	room chan struct{} // one token per message in flight
	wg   sync.WaitGroup
}

func (q *pipeline) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	select {
	case q.room <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("transport: publish %s: window full: %w", m.Topic, ctx.Err())
	}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		err := q.p.Publish(context.WithoutCancel(ctx), m)
		<-q.room
		done(err)
	}()
	return nil
}

func (q *pipeline) Flush(ctx context.Context) error {
	flushed := make(chan struct{})
	go func() { q.wg.Wait(); close(flushed) }()
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("transport: flush: %w", ctx.Err())
	}
}

// PublishAll publishes msgs through ap, in order, and waits for every
// result: nil when all were confirmed, or a *[BatchError] with each
// message's own result. A message ap refuses fails alone; the others go on.
// When ctx ends, PublishAll returns at once: a message not yet handed to
// ap gets ctx's error (it was not sent), and one handed over but not yet
// confirmed gets [ErrUnknownOutcome] with ctx's error (it may have reached
// the broker; its own result, arriving later, is dropped). It is how
// BatchPublishers built on an AsyncPublisher implement PublishBatch.
func PublishAll(ctx context.Context, ap AsyncPublisher, msgs []*handler.Message) error {
	errs := make([]error, len(msgs))
	settled := make([]bool, len(msgs))
	var mu sync.Mutex
	abandoned, failed := false, false
	var wg sync.WaitGroup
	settle := func(i int, err error) {
		mu.Lock()
		if !abandoned {
			errs[i], settled[i] = err, true
			failed = failed || err != nil
		}
		mu.Unlock()
	}
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			for j := i; j < len(msgs); j++ {
				settle(j, fmt.Errorf("transport: publish %s: not sent: %w", msgs[j].Topic, err))
			}
			break
		}
		wg.Add(1)
		if err := ap.PublishAsync(ctx, m, func(err error) { settle(i, err); wg.Done() }); err != nil {
			settle(i, err)
			wg.Done()
		}
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		for i, ok := range settled {
			if !ok {
				errs[i] = fmt.Errorf("transport: publish %s: %w: %w", msgs[i].Topic, ErrUnknownOutcome, ctx.Err())
				failed = true
			}
		}
		abandoned = true
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	if failed {
		return &BatchError{Errs: errs}
	}
	return nil
}
