package kafka

import (
	"context"
	"errors"

	"github.com/IBM/sarama"
)

// run is the group session loop. sarama's Consume joins the group and
// returns when the session ends; after a rebalance (nil) run joins again
// at once, as every Kafka consumer does. A session that failed is not
// retried here: run hands the error to Receive (or to Subscribe, for the
// first join) and waits until the next Receive asks for a rejoin, so that
// the caller's backoff spaces the attempts. run never runs handler code,
// so slow handlers cannot delay heartbeats or polls.
func (s *stream) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		err := s.cg.Consume(ctx, []string{s.topic}, s)
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err == nil {
			continue
		}
		select {
		case s.failed <- err:
		case <-ctx.Done():
			return
		}
		select {
		case <-s.rejoin:
		case <-ctx.Done():
			return
		}
	}
}

// logErrors logs what sarama reports on the group's error channel (failed
// fetches and commits it retries by itself) until the group closes.
func (s *stream) logErrors() {
	for err := range s.cg.Errors() {
		s.cfg.logger.Warn("kafka: consumer group error", "group", s.group, "topic", s.topic, "err", err)
	}
}

// Setup is called by sarama at the start of each generation.
//
// A partition the group has never committed is pinned first: its start
// position ([Latest] or [Earliest]) is resolved and committed now, as the
// Java client commits its positions on a rebalance. Otherwise a partition
// that moves before its first commit would be resolved again by its next
// owner, and with [Latest] the messages in between would be skipped.
func (s *stream) Setup(sess sarama.ConsumerGroupSession) error {
	if parts := sess.Claims()[s.topic]; len(parts) > 0 {
		s.pinStart(sess, parts)
	}
	s.mu.Lock()
	s.want = len(sess.Claims()[s.topic])
	s.claimed = 0
	ready := s.want == 0
	s.mu.Unlock()
	if ready {
		s.once.Do(func() { close(s.ready) })
	}
	return nil
}

func (s *stream) pinStart(sess sarama.ConsumerGroupSession, parts []int32) {
	a, err := sarama.NewClusterAdminFromClient(s.client) // shares s.client; never closed
	if err != nil {
		return
	}
	resp, err := a.ListConsumerGroupOffsets(s.group, map[string][]int32{s.topic: parts})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		resp, err = &sarama.OffsetFetchResponse{}, nil // nothing committed yet
	}
	if err != nil {
		s.cfg.logger.Warn("kafka: cannot read committed offsets", "group", s.group, "err", err)
		return
	}
	at := sarama.OffsetNewest
	if s.start == Earliest {
		at = sarama.OffsetOldest
	}
	pinned := false
	for _, p := range parts {
		if b := resp.GetBlock(s.topic, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
			continue
		}
		off, err := s.client.GetOffset(s.topic, p, at)
		if err != nil || off < 0 {
			continue
		}
		sess.MarkOffset(s.topic, p, off, "")
		pinned = true
	}
	if pinned {
		sess.Commit()
	}
}

// Cleanup is called by sarama at the end of each generation, after every
// ConsumeClaim returned; sarama then commits what was marked.
func (s *stream) Cleanup(sarama.ConsumerGroupSession) error { return nil }
