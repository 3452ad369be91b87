package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// ResetTo says where [Transport.ResetOffsets] moves a group's offsets.
type ResetTo int

const (
	// ResetEarliest moves to the oldest retained message (--to-earliest).
	ResetEarliest ResetTo = iota + 1
	// ResetLatest moves to the log end: everything so far is skipped
	// (--to-latest).
	ResetLatest
	// ResetTime moves to the first message with a timestamp at or after
	// Reset.Time, or the log end if none (--to-datetime).
	ResetTime
	// ResetShift moves the committed offset by Reset.Shift, clamped to the
	// retained range (--shift-by). A partition never committed shifts from
	// the oldest retained message.
	ResetShift
)

// Reset describes an offsets reset: kafka-consumer-groups --reset-offsets.
type Reset struct {
	Group      string    // the consumer group; required
	Topic      string    // the topic; required
	Partitions []int32   // the partitions to move; empty means all
	To         ResetTo   // where to
	Time       time.Time // for ResetTime
	Shift      int64     // for ResetShift; negative moves back (re-consumes)
	// DryRun computes and returns the changes without committing them.
	// A dry run works even while the group has live members.
	DryRun bool
}

// OffsetChange is one partition's move in a reset. From is -1 when the
// group had no committed offset there.
type OffsetChange struct {
	Partition int32
	From, To  int64
}

// ResetOffsets moves r.Group's committed offsets on r.Topic as r says, and
// returns the change per partition. It refuses with [ErrGroupActive] while
// the group has live members (unless r.DryRun): stop every consumer of the
// group first. Run it with DryRun first to see what it would do. The
// group's members, when they start again, resume from the new offsets.
func (t *Transport) ResetOffsets(ctx context.Context, r Reset) ([]OffsetChange, error) {
	if r.Group == "" || r.Topic == "" {
		return nil, fmt.Errorf("%w: kafka: reset needs a Group and a Topic", transport.ErrInvalidOption)
	}
	if r.To < ResetEarliest || r.To > ResetShift {
		return nil, fmt.Errorf("%w: kafka: reset: To is not set", transport.ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, err := t.admin()
	if err != nil {
		return nil, err
	}
	if !r.DryRun {
		if err := groupIdle(a, r.Group); err != nil {
			return nil, err
		}
	}
	if err := t.client.RefreshMetadata(r.Topic); err != nil {
		return nil, fmt.Errorf("kafka: reset %s: %w", r.Topic, err)
	}
	parts := r.Partitions
	if len(parts) == 0 {
		if parts, err = t.client.Partitions(r.Topic); err != nil {
			return nil, fmt.Errorf("kafka: reset %s: %w", r.Topic, err)
		}
	}
	committed, err := t.committed(r.Group, r.Topic, parts)
	if err != nil {
		return nil, err
	}
	changes := make([]OffsetChange, 0, len(parts))
	for _, p := range parts {
		oldest, end, err := t.bounds("reset", r.Topic, p)
		if err != nil {
			return nil, err
		}
		from := committed[p]
		var to int64
		switch r.To {
		case ResetEarliest:
			to = oldest
		case ResetLatest:
			to = end
		case ResetTime:
			to, err = t.client.GetOffset(r.Topic, p, r.Time.UnixMilli())
			if err != nil {
				return nil, fmt.Errorf("kafka: reset %s/%d: %w", r.Topic, p, err)
			}
			if to < 0 {
				to = end
			}
		case ResetShift:
			base := from
			if base < 0 {
				base = oldest
			}
			to = min(max(base+r.Shift, oldest), end)
		}
		changes = append(changes, OffsetChange{Partition: p, From: from, To: to})
	}
	if r.DryRun {
		return changes, nil
	}
	req := sarama.NewOffsetCommitRequest(t.client.Config(), r.Group)
	for _, c := range changes {
		req.AddBlock(r.Topic, c.Partition, c.To, 0, "")
	}
	coord, err := t.client.Coordinator(r.Group)
	if err != nil {
		return nil, fmt.Errorf("kafka: reset %s: coordinator: %w", r.Group, err)
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		return nil, fmt.Errorf("kafka: reset %s: %w", r.Group, err)
	}
	for _, ps := range resp.Errors {
		for p, kerr := range ps {
			if kerr == sarama.ErrNoError {
				continue
			}
			if kerr == sarama.ErrUnknownMemberId || kerr == sarama.ErrIllegalGeneration || kerr == sarama.ErrRebalanceInProgress {
				return nil, fmt.Errorf("kafka: reset %s partition %d: %w (%v)", r.Group, p, ErrGroupActive, kerr)
			}
			return nil, fmt.Errorf("kafka: reset %s partition %d: %w", r.Group, p, kerr)
		}
	}
	return changes, nil
}

// groupIdle returns ErrGroupActive if group has members.
func groupIdle(a sarama.ClusterAdmin, group string) error {
	ds, err := a.DescribeConsumerGroups([]string{group})
	if err != nil {
		return fmt.Errorf("kafka: describe group %s: %w", group, err)
	}
	for _, d := range ds {
		if len(d.Members) > 0 {
			ids := make([]string, 0, len(d.Members))
			for id := range d.Members {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			return fmt.Errorf("%w: %s is %s with %d member(s): %s", ErrGroupActive, group, d.State, len(ids), strings.Join(ids, ", "))
		}
	}
	return nil
}
