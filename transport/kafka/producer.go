package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// producer wraps sarama's AsyncProducer so that each Publish waits for its
// own message's confirmation while concurrent calls share produce requests.
//
// The per-message path allocates little and starts no timer. A message
// travels in a pooled [pending] that holds its sarama.ProducerMessage and
// the bytes of its key and headers, and that rides in
// ProducerMessage.Metadata, so the result loops reach its waiter with no
// lookup. The delivery timeout is a deadline shared by every message handed
// over in the same tick ([deadlines]), not a timer per message.
type producer struct {
	ap      sarama.AsyncProducer
	cfg     *config
	mu      sync.RWMutex // held shared while sending to ap.Input; Close takes it
	closed  bool
	results sync.WaitGroup // the two result loops
	pool    sync.Pool      // *pending
	dl      *deadlines
	async   inflight // PublishAsync's window
}

// pending is one message from its hand-over to its result. Publish and
// PublishAsync reuse it through the producer's pool once its result was
// read; a message whose waiter gave up (timeout, ctx) is never reused,
// since sarama may still hold it.
type pending struct {
	pm   sarama.ProducerMessage
	key  encoder // the record key: bytes in buf
	val  encoder // the payload, not copied
	hdrs []sarama.RecordHeader
	buf  []byte // key, ID and header bytes

	// Exactly one of ch and done is set.
	ch    chan error  // Publish: room for the one result
	done  func(error) // PublishAsync: called once with the result
	topic string      // PublishAsync: for its timeout's error
	state atomic.Int32
	dl    *deadline
	epoch *epoch   // PublishAsync: the Flush epoch it was accepted in
	prev  *pending // PublishAsync: the in-flight list, oldest first
	next  *pending
}

const (
	resultIn  = 1 // the result loop took the message's result
	abandoned = 2 // its deadline passed first: done was called with an unknown outcome
)

// complete hands the message's result to its waiter. It is called once,
// by a result loop, and never blocks (PublishAsync's done must not).
func (w *pending) complete(p *producer, err error) {
	if w.done == nil {
		w.ch <- err
		return
	}
	if !w.state.CompareAndSwap(0, resultIn) {
		return // abandoned at its deadline, and never reused
	}
	p.async.unlink(w)
	done, e := w.done, w.epoch
	<-p.async.room
	done(err)
	e.release()
	if err == nil {
		// A message returned as an error may still be read by sarama (its
		// retry and shutdown paths): it is never reused.
		p.put(w)
	}
}

// encoder is a sarama.Encoder over bytes the caller keeps unchanged until
// the result; a *encoder converts to the interface without allocating, and
// encoding it copies nothing (sarama encodes a key twice: to partition and
// to write).
type encoder []byte

func (e *encoder) Encode() ([]byte, error) { return *e, nil }
func (e *encoder) Length() int             { return len(*e) }

// Header names, shared by every record: sarama only reads them.
var (
	headerIDBytes = []byte(transport.HeaderID)
	headerWMBytes = []byte(headerWatermillID)
)

func newProducer(client sarama.Client, cfg *config) (*producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("kafka: producer: %w", err)
	}
	p := &producer{ap: ap, cfg: cfg, dl: newDeadlines(cfg.deliveryTimeout)}
	p.pool.New = func() any { return &pending{ch: make(chan error, 1)} }
	p.async.init(cfg.publishWindow)
	p.results.Add(2)
	go func() {
		defer p.results.Done()
		for m := range ap.Successes() {
			m.Metadata.(*pending).complete(p, nil)
		}
	}()
	go func() {
		defer p.results.Done()
		for e := range ap.Errors() {
			e.Msg.Metadata.(*pending).complete(p, classify(e.Msg.Topic, e.Err))
		}
	}()
	go p.watch()
	go func() {
		// The deadlines outlive a Close that gave up waiting, so that
		// Publish calls still waiting end on time.
		p.results.Wait()
		p.dl.close()
		close(p.async.stop)
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
	// sarama's own refusals, before anything was sent: a record over
	// Producer.MaxMessageBytes (check refuses it first, unless the counts
	// ever disagree) or any other configuration error.
	var ce sarama.ConfigurationError
	if errors.As(err, &ce) {
		if strings.Contains(string(ce), "MaxMessageBytes") {
			return fmt.Errorf("kafka: publish %s: %w: %w", topic, transport.ErrTooLarge, err)
		}
		return fmt.Errorf("kafka: publish %s: not sent: %w", topic, err)
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
	w := p.pool.Get().(*pending)
	if err := p.send(ctx, m, w); err != nil {
		p.put(w)
		return err
	}
	select {
	case err := <-w.ch:
		if err == nil { // see complete
			p.put(w)
		}
		return err
	case <-w.dl.c:
		return fmt.Errorf("kafka: publish %s: %w: no confirmation within %s", m.Topic, transport.ErrUnknownOutcome, p.cfg.deliveryTimeout)
	case <-ctx.Done():
		return fmt.Errorf("kafka: publish %s: %w: %w", m.Topic, transport.ErrUnknownOutcome, ctx.Err())
	}
}

// put returns w to the pool once its result was read (or it was never
// handed over).
func (p *producer) put(w *pending) {
	w.pm, w.val, w.done, w.topic, w.dl, w.epoch, w.prev, w.next = sarama.ProducerMessage{}, nil, nil, "", nil, nil, nil, nil
	w.state.Store(0)
	clear(w.hdrs)
	p.pool.Put(w)
}

// check refuses a message that cannot be sent, or that the consumer would
// not return as it was sent: a payload over [MaxPayload], a record (key,
// ID, headers, payload and framing, counted as sarama counts them) over
// the producer's record limit, a header named like the ID's headers (it
// would be dropped), or whose name is not UTF-8 (the record would be
// poison). Nothing is sent then.
func (p *producer) check(m *handler.Message) error {
	if m.Topic == "" {
		return fmt.Errorf("%w: kafka: publish: message has no Topic", transport.ErrInvalidOption)
	}
	if len(m.Payload) > p.cfg.maxPayload {
		return fmt.Errorf("kafka: publish %s: %w: payload of %d bytes, limit %d (MaxPayload)", m.Topic, transport.ErrTooLarge, len(m.Payload), p.cfg.maxPayload)
	}
	size := recordOverhead + len(m.Key) + len(m.Payload)
	if m.ID != "" {
		size += 2*(len(m.ID)+headerOverhead) + len(transport.HeaderID) + len(headerWatermillID)
	}
	for k, v := range m.Headers {
		if k == transport.HeaderID || k == headerWatermillID {
			return fmt.Errorf("%w: kafka: publish %s: header %q is where Message.ID travels; set ID instead", transport.ErrInvalidMessage, m.Topic, k)
		}
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: kafka: publish %s: a header name is not valid UTF-8, and a consumer could not read it", transport.ErrInvalidMessage, m.Topic)
		}
		size += len(k) + len(v) + headerOverhead
	}
	if limit := p.cfg.maxRecord() - recordBatchOverhead; size > limit {
		return fmt.Errorf("kafka: publish %s: %w: the record is %d bytes with its key, ID, headers and framing, limit %d (a payload of %d bytes)",
			m.Topic, transport.ErrTooLarge, size, limit, len(m.Payload))
	}
	return nil
}

// How sarama counts a record against Producer.MaxMessageBytes
// (ProducerMessage.ByteSize for record batches v2): the longest varints of
// the record's fields, and of each header's lengths. A record batch adds
// its own header, which the broker counts against max.message.bytes.
const (
	recordOverhead      = 5*binary.MaxVarintLen32 + binary.MaxVarintLen64 + 1
	headerOverhead      = 2 * binary.MaxVarintLen32
	recordBatchOverhead = 61
)

// send fills w with m and hands it to the producer, setting w.dl. Messages
// handed over one after another keep that order within their partition.
func (p *producer) send(ctx context.Context, m *handler.Message, w *pending) error {
	if err := p.check(m); err != nil {
		return err
	}
	w.fill(m)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("kafka: publish %s: %w", m.Topic, transport.ErrClosed)
	}
	select {
	case p.ap.Input() <- &w.pm:
		w.dl = p.dl.current()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: publish %s: %w", m.Topic, ctx.Err())
	}
}

// fill makes w's record from m: Key to the record key, ID to the ferry-id
// and _watermill_message_uuid headers, Headers to record headers. The key
// and header bytes are copied into w.buf, which w keeps across uses; the
// payload is referenced.
func (w *pending) fill(m *handler.Message) {
	if size := byteSize(m); cap(w.buf) < size {
		w.buf = make([]byte, 0, size)
	}
	buf := w.buf[:0]
	w.pm = sarama.ProducerMessage{Topic: m.Topic, Metadata: w}
	if m.Key != "" {
		buf = append(buf, m.Key...)
		w.key = encoder(buf[:len(buf):len(buf)])
		w.pm.Key = &w.key
	}
	if m.Payload != nil {
		w.val = encoder(m.Payload)
		w.pm.Value = &w.val
	}
	hs := w.hdrs[:0]
	if m.ID != "" {
		at := len(buf)
		buf = append(buf, m.ID...)
		id := buf[at:len(buf):len(buf)]
		hs = append(hs,
			sarama.RecordHeader{Key: headerIDBytes, Value: id},
			sarama.RecordHeader{Key: headerWMBytes, Value: id})
	}
	for k, v := range m.Headers { // check refused the ID's names
		at := len(buf)
		buf = append(buf, k...)
		buf = append(buf, v...)
		hs = append(hs, sarama.RecordHeader{Key: buf[at : at+len(k) : at+len(k)], Value: buf[at+len(k) : len(buf) : len(buf)]})
	}
	if len(hs) > 0 {
		w.pm.Headers = hs
	}
	w.hdrs, w.buf = hs, buf
}

// byteSize is how many bytes of key, ID and headers fill copies for m.
func byteSize(m *handler.Message) int {
	n := len(m.Key) + len(m.ID)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}

// PublishBatch publishes msgs through [Transport.PublishAsync], in order,
// and waits for every result: messages share produce requests, and
// messages with the same Key keep their order in msgs. A batch larger
// than [PublishWindow] waits for room as it goes. A message Publish would
// refuse gets that error, and the others are still sent. It returns nil
// when all were confirmed, or a *[transport.BatchError] with each
// message's own result, classified as Publish's are. When ctx ends, a
// message not handed over yet has ctx's error, and one handed over whose
// confirmation has not come an error wrapping [transport.ErrUnknownOutcome]
// and ctx.Err() (the idempotent producer may still write it); the batch
// returns at once.
func (t *Transport) PublishBatch(ctx context.Context, msgs []*handler.Message) error {
	return transport.PublishAll(ctx, t, msgs)
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
	go func() { p.results.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: close producer: %w", ctx.Err())
	}
}
