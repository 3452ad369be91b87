package sqs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ferrymq/ferry/internal/batch"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
)

// closeGrace is how long Close waits for receives in flight.
const closeGrace = 2 * time.Second

// stream is one subscription's stream: its pollers (receive.go) fill
// deliveries, the heartbeat (lease.go) extends leases, and settling
// (settle.go) queues deletes and visibility changes on two batchers.
type stream struct {
	t     *Transport
	q     QueueInfo
	so    awsconf.Sub
	dlq   string
	lease time.Duration
	sem   transport.Semantics

	tokens     chan struct{} // one per received, unsettled message
	deliveries chan *delivery
	errs       chan error // a poller's receive error, for Receive; one per poller at most

	acks *batch.Batcher[string]    // receipt handles to delete
	vis  *batch.Batcher[visChange] // visibility changes (nacks, releases)

	pollCtx       context.Context // ends when Close gives up on the pollers
	stopPolling   context.CancelFunc
	pollMu        sync.Mutex // guards closing and starting pollers
	closing       bool
	pollers       sync.WaitGroup
	paused        int // pollers stopped by an error, restarted by the next Receive; Receive's own
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

// newStream starts the pollers and the heartbeat of a stream on the queue
// info, as planned by p.
func newStream(t *Transport, info QueueInfo, p plan, lease time.Duration) (*stream, error) {
	s := &stream{
		t:          t,
		q:          info,
		so:         p.so,
		dlq:        p.dlq,
		lease:      lease,
		sem:        p.sem,
		tokens:     make(chan struct{}, p.so.MaxInFlight),
		deliveries: make(chan *delivery, p.so.MaxInFlight),
		errs:       make(chan error, p.so.Pollers),
		closed:     make(chan struct{}),
	}
	if err := s.newSettlers(); err != nil {
		return nil, err
	}
	s.pollCtx, s.stopPolling = context.WithCancel(context.Background())
	s.startPollers(p.so.Pollers)
	if p.so.MaxExtension > 0 {
		s.heartbeatDone = make(chan struct{})
		go s.heartbeat()
	}
	return s, nil
}

// startPollers starts n pollers unless the stream is closing.
func (s *stream) startPollers(n int) {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	if s.closing {
		return
	}
	for range n {
		s.pollers.Add(1)
		go s.poll(s.pollCtx)
	}
}

// Semantics declares what the stream guarantees: what [Transport.Declare]
// says for its subscription.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Receive returns the next delivery, in the order ReceiveMessage returned
// them. A failed ReceiveMessage (after the SDK's own retries) stops its
// poller and is returned here, wrapped, once per outage; the next Receive
// starts the stopped pollers again. So the caller owns the backoff between
// attempts, and a stream never loops on a broker error by itself.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	if s.paused > 0 {
		n := s.paused
		s.paused = 0
		s.startPollers(n)
	}
	select {
	case d := <-s.deliveries:
		return d, nil
	default:
	}
	select {
	case d := <-s.deliveries:
		return d, nil
	case err := <-s.errs:
		s.paused++
		for more := true; more; {
			select {
			case <-s.errs:
				s.paused++ // the same outage, seen by another poller
			default:
				more = false
			}
		}
		return nil, err
	case <-s.closed:
		return nil, transport.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
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

// Close stops receiving, releases every unsettled delivery (visibility 0,
// so another consumer gets it at once) and flushes the deletes and
// visibility changes already queued, waiting at most until ctx ends.
// Deliveries it released return an error wrapping ErrClosed when settled
// afterwards, and do nothing. A second Close returns nil.
func (s *stream) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.pollMu.Lock()
		s.closing = true
		s.pollMu.Unlock()
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
				_ = s.vis.Submit(context.Background(), visChange{d.handle, 0}, nil)
			}
		}
		// Drain the buffer so no one receives a released delivery.
		for more := true; more; {
			select {
			case <-s.deliveries:
			default:
				more = false
			}
		}
		err = errors.Join(s.acks.Close(ctx), s.vis.Close(ctx))
		s.t.mu.Lock()
		delete(s.t.streams, s)
		s.t.mu.Unlock()
	})
	return err
}
