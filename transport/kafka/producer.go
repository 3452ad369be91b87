package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// producer wraps sarama's AsyncProducer so that each Publish waits for its
// own message's confirmation while concurrent calls share broker requests.
type producer struct {
	ap      sarama.AsyncProducer
	cfg     *config
	mu      sync.RWMutex // held shared while sending to ap.Input; Close takes it
	closed  bool
	done    sync.WaitGroup // the two result loops
	waiters sync.Pool      // *waiter
}

// waiter carries one message's result from the result loops to Publish.
// Its channel has room for the one result, so a loop never blocks on a
// Publish that gave up waiting.
type waiter struct{ ch chan error }

func newProducer(client sarama.Client, cfg *config) (*producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("kafka: producer: %w", err)
	}
	p := &producer{ap: ap, cfg: cfg}
	p.waiters.New = func() any { return &waiter{ch: make(chan error, 1)} }
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		for m := range ap.Successes() {
			m.Metadata.(*waiter).ch <- nil
		}
	}()
	go func() {
		defer p.done.Done()
		for e := range ap.Errors() {
			e.Msg.Metadata.(*waiter).ch <- classify(e.Msg.Topic, e.Err)
		}
	}()
	return p, nil
}

// definite lists the broker errors that mean the message was not written.
// Every other error after a send may hide a write, and is reported as an
// unknown outcome.
var definite = []error{
	sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage, sarama.ErrInvalidMessageSize,
	sarama.ErrInvalidTopic, sarama.ErrInvalidRecord, sarama.ErrTopicAuthorizationFailed,
	sarama.ErrClusterAuthorizationFailed, sarama.ErrNotEnoughReplicas, sarama.ErrInvalidRequiredAcks,
	sarama.ErrUnsupportedVersion, sarama.ErrUnsupportedForMessageFormat,
}

func classify(topic string, err error) error {
	if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		return fmt.Errorf("kafka: publish %s: %w: %w", topic, transport.ErrTooLarge, err)
	}
	for _, d := range definite {
		if errors.Is(err, d) {
			return fmt.Errorf("kafka: publish %s: %w", topic, err)
		}
	}
	return fmt.Errorf("kafka: publish %s: %w: %w", topic, transport.ErrUnknownOutcome, err)
}

// Publish writes m to m.Topic and returns once every in-sync replica has it
// (acks=all). The record key is m.Key (none when empty), so the partition
// follows the partitioner ([Murmur2] by default); the ID travels in the
// "ferry-id" header and in watermill-kafka's "_watermill_message_uuid", and
// Headers as record headers.
//
// Concurrent calls are batched into shared produce requests. If the
// confirmation does not arrive within [DeliveryTimeout], or ctx ends after
// the message was handed to the producer, the error wraps
// [transport.ErrUnknownOutcome] (and ctx.Err()): the idempotent producer
// may still write it, exactly once. Retry with the same ID.
func (t *Transport) Publish(ctx context.Context, m *handler.Message) error {
	return t.prod.publish(ctx, m)
}

func (p *producer) publish(ctx context.Context, m *handler.Message) error {
	w, err := p.send(ctx, m)
	if err != nil {
		return err
	}
	return p.wait(ctx, w, m.Topic)
}

// send hands m to the producer. Messages handed over one after another
// keep that order within their partition.
func (p *producer) send(ctx context.Context, m *handler.Message) (*waiter, error) {
	if m.Topic == "" {
		return nil, fmt.Errorf("%w: kafka: publish: message has no Topic", transport.ErrInvalidOption)
	}
	if len(m.Payload) > p.cfg.maxPayload {
		return nil, fmt.Errorf("kafka: publish %s: %w: %d bytes, limit %d", m.Topic, transport.ErrTooLarge, len(m.Payload), p.cfg.maxPayload)
	}
	w := p.waiters.Get().(*waiter)
	pm := toProducerMessage(m)
	pm.Metadata = w

	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		p.waiters.Put(w)
		return nil, fmt.Errorf("kafka: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	select {
	case p.ap.Input() <- pm:
		p.mu.RUnlock()
		return w, nil
	case <-ctx.Done():
		p.mu.RUnlock()
		p.waiters.Put(w)
		return nil, fmt.Errorf("kafka: publish %s: %w", m.Topic, ctx.Err())
	}
}

// wait waits for the confirmation of a message handed over by send.
func (p *producer) wait(ctx context.Context, w *waiter, topic string) error {
	timer := time.NewTimer(p.cfg.deliveryTimeout)
	defer timer.Stop()
	select {
	case err := <-w.ch:
		p.waiters.Put(w)
		return err
	case <-timer.C:
		return fmt.Errorf("kafka: publish %s: %w: no confirmation within %s", topic, transport.ErrUnknownOutcome, p.cfg.deliveryTimeout)
	case <-ctx.Done():
		return fmt.Errorf("kafka: publish %s: %w: %w", topic, transport.ErrUnknownOutcome, ctx.Err())
	}
}

// PublishBatch hands every message to the producer, in order, before
// waiting for any confirmation, so that they share produce requests and
// messages with the same Key keep their order in msgs. It returns nil when
// all were confirmed, or a *[transport.BatchError]. (Concurrent Publish
// calls keep no order between them.) The delivery timeout applies to each
// message from its hand-over.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	errs := make([]error, len(msgs))
	ws := make([]*waiter, len(msgs))
	for i, m := range msgs {
		ws[i], errs[i] = t.prod.send(ctx, m)
	}
	failed := false
	for i, w := range ws {
		if w != nil {
			errs[i] = t.prod.wait(ctx, w, msgs[i].Topic)
		}
		failed = failed || errs[i] != nil
	}
	if failed {
		return &transport.BatchError{Errs: errs}
	}
	return nil
}

// close flushes what the producer holds, waiting until ctx ends.
func (p *producer) close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.ap.AsyncClose()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.done.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: close producer: %w", ctx.Err())
	}
}

// toProducerMessage maps m onto a record: Key to the record key, ID to the
// ferry-id and _watermill_message_uuid headers, Headers to record headers.
func toProducerMessage(m *handler.Message) *sarama.ProducerMessage {
	pm := &sarama.ProducerMessage{Topic: m.Topic}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	if m.Payload != nil {
		pm.Value = sarama.ByteEncoder(m.Payload)
	}
	n := len(m.Headers)
	if m.ID != "" {
		n += 2
	}
	if n > 0 {
		hs := make([]sarama.RecordHeader, 0, n)
		if m.ID != "" {
			id := []byte(m.ID)
			hs = append(hs,
				sarama.RecordHeader{Key: []byte(transport.HeaderID), Value: id},
				sarama.RecordHeader{Key: []byte(headerWatermillID), Value: id})
		}
		for k, v := range m.Headers {
			if k == transport.HeaderID || k == headerWatermillID {
				continue // the ID fields own these names
			}
			hs = append(hs, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		pm.Headers = hs
	}
	return pm
}
