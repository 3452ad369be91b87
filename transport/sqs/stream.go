package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// closeGrace is how long Close waits for receives in flight.
const closeGrace = 2 * time.Second

// callTimeout bounds background calls (deletes, visibility changes).
const callTimeout = 30 * time.Second

// Delivery states.
const (
	stateUnsettled   uint32 = iota
	stateExtending          // the heartbeat is extending it
	stateSettled            // acked, nacked or released
	stateNackPending        // nacked while being extended: the heartbeat sends the nack
	stateReleased           // released by Stream.Close
)

// settledErr is the error for settling a delivery in state st.
func settledErr(st uint32) error {
	if st == stateReleased {
		return fmt.Errorf("sqs: delivery released by Stream.Close: %w", transport.ErrClosed)
	}
	return transport.ErrSettled
}

// Subscribe opens a stream on the queue sub.Topic, creating it if it does
// not exist (with AutoCreate) and, when a DLQ is configured, declaring it and
// attaching the redrive policy. sub.Group and sub.Consumer are ignored: an
// SQS queue is one group whose consumers share its messages; give each group
// its own queue (see package sns for fan-out). sub.StartAtOldest is ignored:
// a queue always delivers what it holds. sub.Options takes the keys
// visibility, max_extension, wait, pollers, max_in_flight, dlq and
// max_receive_count. ctx bounds the setup calls only.
func (t *Transport) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	if t.closed.Load() {
		return nil, transport.ErrClosed
	}
	if err := transport.UnknownKeys(Scheme, sub.Options, subKeys...); err != nil {
		return nil, err
	}
	o := t.o
	opts, err := parseOptions(sub.Options)
	if err != nil {
		return nil, err
	}
	for _, opt := range opts {
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	so := o.sub
	if sub.MaxInFlight > 0 {
		so.maxInFlight = sub.MaxInFlight
	}
	var info QueueInfo
	if so.dlq != "" {
		info, err = t.DeclareQueue(ctx, Queue{Name: sub.Topic, DeadLetter: &DeadLetter{Queue: so.dlq, MaxReceiveCount: so.maxReceiveCount}})
		t.forget(sub.Topic)
	} else {
		var q *queueRef
		q, err = t.resolve(ctx, sub.Topic)
		if q != nil {
			info = q.info
		}
	}
	if err != nil {
		return nil, err
	}
	lease := so.visibility
	if lease == 0 {
		lease = max(info.Visibility, time.Second)
	}
	s := &stream{
		t:          t,
		q:          info,
		so:         so,
		lease:      lease,
		tokens:     make(chan struct{}, so.maxInFlight),
		deliveries: make(chan *delivery, so.maxInFlight),
		failed:     make(chan error, 1),
		closed:     make(chan struct{}),
	}
	s.sem = Semantics(info)
	s.acks = newBatcher(10, 0, 8, s.deleteHandler)
	s.vis = newBatcher(10, 0, 4, s.visibilityHandler)
	var pollCtx context.Context
	pollCtx, s.stopPolling = context.WithCancel(context.Background())
	for range so.pollers {
		s.pollers.Add(1)
		go s.poll(pollCtx)
	}
	if so.maxExtension > 0 {
		s.heartbeatDone = make(chan struct{})
		go s.heartbeat()
	}
	t.mu.Lock()
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	return s, nil
}

// Semantics returns what a stream on the queue described by info declares:
// per-key (MessageGroupId) order on FIFO queues and none on standard ones,
// per-message acks (DeleteMessage), redelivery on Nack or lease expiry,
// Nack delays (ChangeMessageVisibility), the broker's receive count as the
// attempt, lease extension, a native DLQ when the queue has a redrive
// policy, no replay, native headers, and the queue's maximum message size
// less 8 KiB kept for attributes.
func Semantics(info QueueInfo) transport.Semantics {
	s := transport.Semantics{
		Transport:       Scheme,
		Ordering:        transport.OrderNone,
		Ack:             transport.AckPerMessage,
		Redelivery:      transport.RedeliverOnNack,
		NackDelay:       true,
		Attempts:        true,
		Extend:          true,
		NativeDLQ:       info.RedrivePolicy != nil,
		FanOut:          false, // the queue is the one group: fan out with SNS
		Replay:          false,
		Headers:         true,
		MaxPayload:      maxPayload(info.MaxSize),
		RedeliveryDelay: 0,
	}
	if info.FIFO {
		s.Ordering = transport.OrderPerKey
	}
	if info.MaxSize == 0 {
		s.MaxPayload = maxPayload(MaxMessageSize)
	}
	return s
}

type stream struct {
	t     *Transport
	q     QueueInfo
	so    subOptions
	lease time.Duration
	sem   transport.Semantics

	tokens     chan struct{} // one per received, unsettled message
	deliveries chan *delivery
	failed     chan error // a fatal receive error, given to Receive

	acks *batcher[string]    // receipt handles to delete
	vis  *batcher[visChange] // visibility changes (nacks, releases, extends)

	stopPolling   context.CancelFunc
	pollers       sync.WaitGroup
	heartbeatDone chan struct{}

	leaseMu sync.Mutex
	leased  []*delivery // unsettled deliveries, for the heartbeat and release

	closeOnce sync.Once
	closed    chan struct{}
}

var _ transport.Stream = (*stream)(nil)

type visChange struct {
	handle  string
	seconds int32
}

// Semantics declares what the stream guarantees; see the package function
// [Semantics].
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Receive returns the next delivery, in the order ReceiveMessage returned
// them.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	select {
	case d := <-s.deliveries:
		return d, nil
	default:
	}
	select {
	case d := <-s.deliveries:
		return d, nil
	case err := <-s.failed:
		s.failed <- err
		return nil, err
	case <-s.closed:
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *stream) poll(ctx context.Context) {
	defer s.pollers.Done()
	backoff := 100 * time.Millisecond
	for {
		// Take at least one token, then up to ten without waiting.
		select {
		case s.tokens <- struct{}{}:
		case <-s.closed:
			return
		}
		n := 1
		for n < 10 {
			select {
			case s.tokens <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		in := &awssqs.ReceiveMessageInput{
			QueueUrl:              &s.q.URL,
			MaxNumberOfMessages:   int32(n),
			WaitTimeSeconds:       int32(s.so.wait / time.Second),
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp,
				types.MessageSystemAttributeNameMessageGroupId,
				types.MessageSystemAttributeNameMessageDeduplicationId,
			},
		}
		if s.so.visibility > 0 {
			in.VisibilityTimeout = int32(s.so.visibility / time.Second)
		}
		out, err := s.t.client.ReceiveMessage(ctx, in)
		now := time.Now()
		if err != nil {
			s.release(n)
			if ctx.Err() != nil || s.isClosed() {
				return
			}
			if isFatal(err) {
				select {
				case s.failed <- fmt.Errorf("sqs: receive from %s: %w", s.q.Name, err):
				default:
				}
				return
			}
			s.t.log.Warn("sqs: receive failed; retrying", "queue", s.q.Name, "error", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.closed:
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.release(n - len(out.Messages))
		if s.isClosed() {
			// Closed while this receive was out: give the messages back.
			for i := range out.Messages {
				s.vis.add(&batchItem[visChange]{v: visChange{aws.ToString(out.Messages[i].ReceiptHandle), 0}})
			}
			return
		}
		if len(out.Messages) == 0 {
			continue
		}
		batch := make([]*delivery, 0, len(out.Messages))
		for i := range out.Messages {
			d, err := s.newDelivery(&out.Messages[i], now)
			if err != nil {
				// Undecodable: leave it to the redrive policy.
				s.t.log.Warn("sqs: undecodable message left on the queue", "queue", s.q.Name,
					"message_id", aws.ToString(out.Messages[i].MessageId), "error", err)
				s.release(1)
				continue
			}
			batch = append(batch, d)
		}
		s.leaseMu.Lock()
		s.leased = append(s.leased, batch...)
		s.leaseMu.Unlock()
		for _, d := range batch {
			s.deliveries <- d // never blocks: a token was taken for it
		}
	}
}

func (s *stream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *stream) release(n int) {
	for range n {
		<-s.tokens
	}
}

// isFatal reports errors a retry cannot fix: the queue is gone, or access
// is denied.
func isFatal(err error) bool {
	var nf *types.QueueDoesNotExist
	return errors.As(err, &nf) || isCode(err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
		"AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "UnrecognizedClientException")
}

func (s *stream) newDelivery(m *types.Message, now time.Time) (*delivery, error) {
	dec, err := s.t.codec.Decode(aws.ToString(m.Body), fromSQSAttributes(m.MessageAttributes))
	if err != nil {
		return nil, err
	}
	sys := m.Attributes
	msg := &handler.Message{
		ID:      dec.ID,
		Key:     dec.Key,
		Topic:   s.q.Name,
		Payload: dec.Payload,
		Headers: dec.Headers,
	}
	if msg.ID == "" {
		msg.ID = sys["MessageDeduplicationId"]
		if msg.ID == "" {
			msg.ID = aws.ToString(m.MessageId)
		}
	}
	if g := sys["MessageGroupId"]; g != "" && msg.Key == "" && !strings.HasPrefix(g, wire.NoKeyGroupPrefix) {
		msg.Key = g
	}
	f := handler.Facts{
		Transport:  Scheme,
		Partition:  -1,
		Offset:     -1,
		BrokerID:   aws.ToString(m.MessageId),
		ReceivedAt: now,
	}
	f.Attempt, _ = strconv.Atoi(sys["ApproximateReceiveCount"])
	if ms, err := strconv.ParseInt(sys["SentTimestamp"], 10, 64); err == nil {
		f.PublishedAt = time.UnixMilli(ms)
	}
	msg.SetFacts(f)
	return &delivery{s: s, msg: msg, handle: aws.ToString(m.ReceiptHandle), received: now,
		leaseEnd: now.Add(s.lease)}, nil
}

// heartbeat extends the leases of unsettled deliveries: every quarter lease
// it extends, by one lease, those with less than half a lease left, until
// maxExtension has passed since their receipt.
func (s *stream) heartbeat() {
	defer close(s.heartbeatDone)
	tick := max(s.lease/4, 50*time.Millisecond)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-tk.C:
		}
		now := time.Now()
		var due []*delivery
		s.leaseMu.Lock()
		live := s.leased[:0]
		for _, d := range s.leased {
			st := d.state.Load()
			if st == stateSettled || st == stateNackPending || st == stateReleased {
				continue
			}
			live = append(live, d)
			if d.leaseEnd.Sub(now) < s.lease/2 && now.Sub(d.received) < s.so.maxExtension &&
				d.state.CompareAndSwap(stateUnsettled, stateExtending) {
				due = append(due, d)
			}
		}
		clear(s.leased[len(live):])
		s.leased = live
		s.leaseMu.Unlock()
		for len(due) > 0 {
			n := min(len(due), 10)
			s.extend(due[:n], s.lease)
			due = due[n:]
		}
	}
}

// extend sets the visibility of ds (all in stateExtending) to d from now,
// then returns them to unsettled, or sends the nack that arrived meanwhile.
func (s *stream) extend(ds []*delivery, d time.Duration) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(ds))
	secs := int32(d / time.Second)
	for i, dl := range ds {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(dl.handle), VisibilityTimeout: secs,
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	out, err := s.t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	cancel()
	failed := map[int]bool{}
	if err != nil {
		s.t.log.Warn("sqs: lease extension failed", "queue", s.q.Name, "messages", len(ds), "error", err)
	} else {
		for _, f := range out.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			failed[i] = true
		}
	}
	for i, dl := range ds {
		if err == nil && !failed[i] {
			dl.leaseEnd = start.Add(d)
		}
		if !dl.state.CompareAndSwap(stateExtending, stateUnsettled) &&
			dl.state.CompareAndSwap(stateNackPending, stateSettled) {
			s.vis.add(&batchItem[visChange]{v: visChange{dl.handle, int32(dl.nackDelay.Load())}})
		}
	}
}

func (s *stream) deleteHandler(items []*batchItem[string]) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(it.v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := s.t.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	if err != nil {
		// The messages will be redelivered when their leases end.
		s.t.log.Warn("sqs: delete failed; messages will be redelivered", "queue", s.q.Name, "messages", len(items), "error", err)
	} else if len(out.Failed) > 0 {
		s.t.log.Warn("sqs: delete refused; messages will be redelivered", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code), "reason", aws.ToString(out.Failed[0].Message))
	}
	for _, it := range items {
		it.err = err
		if it.done != nil {
			close(it.done)
		}
	}
}

func (s *stream) visibilityHandler(items []*batchItem[visChange]) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(items))
	for i, it := range items {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(it.v.handle), VisibilityTimeout: it.v.seconds,
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	out, err := s.t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.q.URL, Entries: entries})
	if err != nil {
		s.t.log.Warn("sqs: visibility change failed; messages return when their leases end", "queue", s.q.Name, "messages", len(items), "error", err)
	} else if len(out.Failed) > 0 {
		s.t.log.Debug("sqs: visibility change refused", "queue", s.q.Name, "messages", len(out.Failed),
			"code", aws.ToString(out.Failed[0].Code))
	}
	for _, it := range items {
		it.err = err
		if it.done != nil {
			close(it.done)
		}
	}
}

// Close stops receiving, releases every unsettled delivery (visibility 0,
// so another consumer gets it at once) and flushes the deletes and
// visibility changes already queued, waiting at most until ctx ends.
// Deliveries it released return an error wrapping ErrClosed when settled
// afterwards, and do nothing. A second Close returns nil.
func (s *stream) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		// Let receives in flight finish (their messages are released), for
		// up to closeGrace; cancel the rest. A cancelled long poll may leave
		// the messages it took invisible until their visibility timeout.
		polled := make(chan struct{})
		go func() { s.pollers.Wait(); close(polled) }()
		grace := time.NewTimer(closeGrace)
		select {
		case <-polled:
		case <-grace.C:
		case <-ctx.Done():
		}
		grace.Stop()
		s.stopPolling()
		<-polled
		if s.heartbeatDone != nil {
			<-s.heartbeatDone
		}
		s.leaseMu.Lock()
		leased := s.leased
		s.leased = nil
		s.leaseMu.Unlock()
		for _, d := range leased {
			if d.state.CompareAndSwap(stateUnsettled, stateReleased) {
				s.vis.add(&batchItem[visChange]{v: visChange{d.handle, 0}})
			}
		}
		// Drain the buffer so no one receives a released delivery.
		for {
			select {
			case <-s.deliveries:
				continue
			default:
			}
			break
		}
		err = errors.Join(s.acks.flush(ctx), s.vis.flush(ctx))
		s.t.mu.Lock()
		delete(s.t.streams, s)
		s.t.mu.Unlock()
	})
	return err
}

// delivery is one received message.
type delivery struct {
	s        *stream
	msg      *handler.Message
	handle   string
	received time.Time
	leaseEnd time.Time // written by the heartbeat only (under stateExtending)

	state     atomic.Uint32
	nackDelay atomic.Int64 // seconds, for stateNackPending
}

var (
	_ transport.Delivery = (*delivery)(nil)
	_ transport.Extender = (*delivery)(nil)
)

// Message returns the message.
func (d *delivery) Message() *handler.Message { return d.msg }

// Ack queues a DeleteMessage for the delivery, coalesced with others into
// DeleteMessageBatch calls; it returns before SQS has answered. A delete
// that fails is logged and the message is redelivered when its lease ends.
func (d *delivery) Ack(ctx context.Context) error {
	for {
		st := d.state.Load()
		if st != stateUnsettled && st != stateExtending {
			return settledErr(st)
		}
		if d.state.CompareAndSwap(st, stateSettled) {
			break
		}
	}
	d.s.acks.add(&batchItem[string]{v: d.handle})
	<-d.s.tokens
	return nil
}

// Nack makes the message visible again after delay (ChangeMessageVisibility
// to delay, rounded up to whole seconds, at most 12 h; 0 is at once). The
// call is coalesced into ChangeMessageVisibilityBatch calls and returns
// before SQS has answered.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	secs := int64((max(delay, 0) + time.Second - 1) / time.Second)
	secs = min(secs, 12*3600)
	d.nackDelay.Store(secs)
	if d.state.CompareAndSwap(stateUnsettled, stateSettled) {
		d.s.vis.add(&batchItem[visChange]{v: visChange{d.handle, int32(secs)}})
	} else if !d.state.CompareAndSwap(stateExtending, stateNackPending) {
		return settledErr(d.state.Load())
	}
	<-d.s.tokens
	return nil
}

// Extend sets the delivery's visibility to d from now (0 means the stream's
// lease), and waits for SQS's answer. The heartbeat does this on its own up
// to MaxExtension; Extend is for explicit control.
func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		dur = d.s.lease
	}
	secs := int32(min((dur+time.Second-1)/time.Second, 12*3600))
	if st := d.state.Load(); st == stateSettled || st == stateNackPending || st == stateReleased {
		return settledErr(st)
	}
	start := time.Now()
	_, err := d.s.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: &d.s.q.URL, ReceiptHandle: &d.handle, VisibilityTimeout: secs,
	})
	if err != nil {
		return fmt.Errorf("sqs: extend lease on %s: %w", d.s.q.Name, err)
	}
	if d.state.CompareAndSwap(stateUnsettled, stateExtending) {
		d.leaseEnd = start.Add(time.Duration(secs) * time.Second)
		if !d.state.CompareAndSwap(stateExtending, stateUnsettled) && d.state.CompareAndSwap(stateNackPending, stateSettled) {
			d.s.vis.add(&batchItem[visChange]{v: visChange{d.handle, int32(d.nackDelay.Load())}})
		}
	}
	return nil
}
