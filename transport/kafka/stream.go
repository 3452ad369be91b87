package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// stream is one group member consuming one topic. Its goroutines, one
// file each:
//
//   - the group session loop (group.go): joins, rejoins after each
//     rebalance, and reports a failed session to Receive;
//   - one claim loop per assigned partition (claim.go), moving the
//     partition's records into its window (partition.go) and to Receive;
//   - the caller's, in Receive (receive.go), which also dead-letters the
//     records that cannot be decoded (dlq.go);
//   - whoever settles, in Ack and Nack (settle.go).
type stream struct {
	t      *Transport
	cfg    *config
	topic  string
	group  string
	dlq    string // where poison records go: t.DLQName of the subscription
	window int
	start  Position
	revoke time.Duration
	sem    transport.Semantics

	client sarama.Client
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc

	out     chan []*delivery // batches of deliveries for Receive, in partition order
	failed  chan error       // a group session that failed, for Receive to report
	rejoin  chan struct{}    // Receive asks the session loop to join again
	closing chan struct{}    // closed by Close: stop handing out, do not wait
	done    chan struct{}    // closed when run returned
	ready   chan struct{}    // closed once the first assignment is consuming
	once    sync.Once        // closes ready
	closed  atomic.Bool

	mu      sync.Mutex
	claimed int // partitions of the current generation whose claims started
	want    int // partitions assigned in the current generation

	// Only Receive touches these.
	buf        []*delivery // the current batch
	mustRejoin bool        // a failed session was reported: join again
}

var _ transport.Stream = (*stream)(nil)

// Semantics declares per-key order (per partition), offset commits,
// redelivery on Nack with delay, attempts counted in process, fan-out to
// groups, replay, and native headers: what [Transport.Declare] returns.
func (s *stream) Semantics() transport.Semantics { return s.sem }

// Close stops handing out messages, commits the finished prefix of every
// partition, leaves the group (its partitions move to the other members,
// which redeliver what was not finished) and disconnects. ctx bounds the
// wait. Ack and Nack after Close return an error wrapping
// [transport.ErrClosed] and do nothing. A second Close returns nil.
func (s *stream) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.closing)
	s.t.mu.Lock()
	delete(s.t.streams, s)
	s.t.mu.Unlock()
	finished := make(chan error, 1)
	go func() {
		err := s.cg.Close() // ends the session: claims release, sarama commits, leaves
		s.cancel()
		<-s.done
		if cerr := s.client.Close(); cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) && err == nil {
			err = cerr
		}
		finished <- err
	}()
	select {
	case err := <-finished:
		if err != nil {
			return fmt.Errorf("kafka: close %s: %w", s.topic, err)
		}
		return nil
	case <-ctx.Done():
		s.cancel()
		return fmt.Errorf("kafka: close %s: %w", s.topic, ctx.Err())
	}
}
