package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// DLQSuffix is appended to a topic's name to name its dead-letter topic.
const DLQSuffix = ".dlq"

// headerReplayed marks a record appended to a dead-letter topic by
// ReplayDLQ: its value names the replayed record as "partition/offset".
// Kafka cannot delete one record, so a replayed dead letter is hidden by
// this marker instead.
const headerReplayed = "ferry-dlq-replayed"

// DLQTopic returns the dead-letter topic of topic: topic + ".dlq".
func DLQTopic(topic string) string { return topic + DLQSuffix }

func (t *Transport) admin() (sarama.ClusterAdmin, error) {
	// NewClusterAdminFromClient shares t.client; the admin is never closed,
	// since closing it would close the client.
	a, err := sarama.NewClusterAdminFromClient(t.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: admin: %w", err)
	}
	return a, nil
}

// ensureDLQ creates topic's dead-letter topic, with as many partitions as
// topic, if it does not exist yet. A failure (no permission to create
// topics, say) is logged, not returned: dead-lettering then fails loudly
// at its first write instead.
func (t *Transport) ensureDLQ(topic string) {
	a, err := t.admin()
	if err != nil {
		t.cfg.logger.Warn("kafka: cannot create the dead-letter topic", "topic", DLQTopic(topic), "err", err)
		return
	}
	n := int32(-1)
	if ps, err := t.client.Partitions(topic); err == nil && len(ps) > 0 {
		n = int32(len(ps))
	}
	err = a.CreateTopic(DLQTopic(topic), &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: -1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.cfg.logger.Warn("kafka: cannot create the dead-letter topic", "topic", DLQTopic(topic), "err", err)
	}
}

// deadLetterPoison publishes an undecodable record to its topic's
// dead-letter topic, with the dead-letter headers and the error class
// "permanent", then finishes it so the commit can pass it. Handlers never
// see it. If the dead-letter write fails it is tried again with backoff
// while the partition is owned; the commit holds at the record meanwhile.
func (s *stream) deadLetterPoison(p *partition, r *record, cm *sarama.ConsumerMessage, cause error) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	m := &handler.Message{Topic: DLQTopic(cm.Topic), Payload: cm.Value, Headers: map[string]string{}}
	if cm.Key != nil {
		m.Key = string(cm.Key)
	}
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		switch k := string(h.Key); k {
		case transport.HeaderID, headerWatermillID:
			if m.ID == "" {
				m.ID = string(h.Value)
			}
		default:
			m.Headers[k] = string(h.Value)
		}
	}
	m.Headers[transport.HeaderError] = cause.Error()
	m.Headers[transport.HeaderErrorClass] = "permanent"
	m.Headers[transport.HeaderAttempts] = "0"
	m.Headers[transport.HeaderSubscription] = s.group
	m.Headers[transport.HeaderOriginalTopic] = cm.Topic
	m.Headers[transport.HeaderOriginalPart] = strconv.Itoa(int(cm.Partition))
	m.Headers[transport.HeaderOriginalOffset] = strconv.FormatInt(cm.Offset, 10)
	m.Headers[transport.HeaderFirstFailure] = now
	m.Headers[transport.HeaderLastFailure] = now
	s.cfg.logger.Warn("kafka: poison message sent to the dead-letter topic", "topic", cm.Topic,
		"partition", cm.Partition, "offset", cm.Offset, "dlq", m.Topic, "err", cause)
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.deliveryTimeout)
		err := s.t.prod.publish(ctx, m)
		cancel()
		if err == nil {
			_ = p.finish(r)
			return
		}
		s.cfg.logger.Error("kafka: dead-letter write failed; the partition's commit holds", "dlq", m.Topic, "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 30*time.Second)
		case <-p.stop:
			p.drop()
			return
		}
	}
}

// ListDLQ returns up to limit messages of the dead-letter topic dlq (such
// as "orders.dlq"), oldest first by record timestamp, skipping those
// already replayed. Nothing is consumed or committed. Each message's Facts
// carry its partition and offset in dlq. It reads the whole topic up to
// its current end, so it costs one pass over the DLQ.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	msgs, err := t.readDLQ(ctx, dlq)
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[:limit]
	}
	return msgs, nil
}

// ReplayDLQ republishes the dead letters of dlq that r selects, oldest
// first, to r.To or their original topic, with their ID, Key, Payload and
// original headers, and hides each from the DLQ once its publish is
// confirmed, by appending a marker record (Kafka cannot delete one record;
// retention removes both). It returns how many it replayed. A failure part
// way leaves the rest listed; replaying again is safe, as consumers dedupe
// on the ID.
func (t *Transport) ReplayDLQ(ctx context.Context, dlq string, r transport.Replay) (int, error) {
	msgs, err := t.readDLQ(ctx, dlq)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range msgs {
		if r.Limit > 0 && n >= r.Limit {
			break
		}
		if !r.Selects(m) {
			continue
		}
		to := r.Destination(m)
		if to == "" {
			return n, fmt.Errorf("kafka: replay %s: message %q has no %s header and Replay.To is empty", dlq, m.ID, transport.HeaderOriginalTopic)
		}
		if err := t.Publish(ctx, transport.StripDeadLetterHeaders(m, to)); err != nil {
			return n, fmt.Errorf("kafka: replay %s: %w", dlq, err)
		}
		f := m.Facts()
		marker := &handler.Message{Topic: dlq, Key: m.Key, Headers: map[string]string{
			headerReplayed: fmt.Sprintf("%d/%d", f.Partition, f.Offset),
		}}
		if err := t.Publish(ctx, marker); err != nil {
			return n, fmt.Errorf("kafka: replay %s: marking %q replayed (it was replayed, and will be listed again): %w", dlq, m.ID, err)
		}
		n++
	}
	return n, nil
}

// readDLQ reads every partition of dlq from its oldest to its current end
// and returns the dead letters not hidden by a replay marker, oldest first.
func (t *Transport) readDLQ(ctx context.Context, dlq string) ([]*handler.Message, error) {
	if err := t.client.RefreshMetadata(dlq); err != nil {
		return nil, fmt.Errorf("kafka: read %s: %w", dlq, err)
	}
	parts, err := t.client.Partitions(dlq)
	if err != nil {
		return nil, fmt.Errorf("kafka: read %s: %w", dlq, err)
	}
	c, err := sarama.NewConsumerFromClient(t.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: read %s: %w", dlq, err)
	}
	defer func() { _ = c.Close() }()
	var all []*handler.Message
	replayed := map[string]bool{}
	for _, p := range parts {
		oldest, err := t.client.GetOffset(dlq, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: read %s/%d: %w", dlq, p, err)
		}
		end, err := t.client.GetOffset(dlq, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka: read %s/%d: %w", dlq, p, err)
		}
		if end <= oldest {
			continue
		}
		pc, err := c.ConsumePartition(dlq, p, oldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: read %s/%d: %w", dlq, p, err)
		}
		err = func() error {
			defer func() { _ = pc.Close() }()
			for {
				select {
				case cm := <-pc.Messages():
					if v := headerValue(cm, headerReplayed); v != "" {
						replayed[v] = true
					} else {
						m := &handler.Message{}
						_ = decode(cm, m) // a poison dead letter is listed as decoded as far as it goes
						m.SetFacts(handler.Facts{Transport: Scheme, Partition: p, Offset: cm.Offset, PublishedAt: cm.Timestamp})
						all = append(all, m)
					}
					if cm.Offset >= end-1 {
						return nil
					}
				case err := <-pc.Errors():
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}()
		if err != nil {
			return nil, fmt.Errorf("kafka: read %s/%d: %w", dlq, p, err)
		}
	}
	out := all[:0]
	for _, m := range all {
		f := m.Facts()
		if !replayed[fmt.Sprintf("%d/%d", f.Partition, f.Offset)] {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b *handler.Message) int {
		return a.Facts().PublishedAt.Compare(b.Facts().PublishedAt)
	})
	return out, nil
}

func headerValue(cm *sarama.ConsumerMessage, name string) string {
	for _, h := range cm.Headers {
		if h != nil && string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

// Lag returns, for each partition of sub.Topic, how far sub's group is
// behind: the log-end offset minus the committed offset, and the age of
// the oldest unconsumed message (from its record timestamp). A partition
// the group never committed counts from its oldest retained message when
// the group starts at [Earliest], and as no lag when it starts at
// [Latest]. It reads one record per lagging partition.
func (t *Transport) Lag(ctx context.Context, sub transport.Subscription) ([]transport.Lag, error) {
	group := sub.Group
	if group == "" {
		group = t.cfg.group
	}
	start := t.cfg.start
	if sub.StartAtOldest || sub.Options["start"] == string(Earliest) {
		start = Earliest
	}
	if err := t.client.RefreshMetadata(sub.Topic); err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	parts, err := t.client.Partitions(sub.Topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	committed, err := t.committed(group, sub.Topic, parts)
	if err != nil {
		return nil, err
	}
	c, err := sarama.NewConsumerFromClient(t.client)
	if err != nil {
		return nil, fmt.Errorf("kafka: lag %s: %w", sub.Topic, err)
	}
	defer func() { _ = c.Close() }()
	out := make([]transport.Lag, 0, len(parts))
	for _, p := range parts {
		end, err := t.client.GetOffset(sub.Topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka: lag %s/%d: %w", sub.Topic, p, err)
		}
		oldest, err := t.client.GetOffset(sub.Topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: lag %s/%d: %w", sub.Topic, p, err)
		}
		from := committed[p]
		switch {
		case from < 0 && start == Earliest:
			from = oldest
		case from < 0:
			from = end
		case from < oldest:
			from = oldest // fell out of retention
		}
		l := transport.Lag{Partition: strconv.Itoa(int(p)), Messages: max(end-from, 0)}
		if l.Messages > 0 {
			ts, err := firstTimestamp(ctx, c, sub.Topic, p, from)
			if err != nil {
				return nil, fmt.Errorf("kafka: lag %s/%d: %w", sub.Topic, p, err)
			}
			if !ts.IsZero() {
				l.OldestAge = max(time.Since(ts), 0)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// committed returns group's committed offset per partition, -1 where none.
func (t *Transport) committed(group, topic string, parts []int32) (map[int32]int64, error) {
	a, err := t.admin()
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(parts))
	resp, err := a.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		for _, p := range parts {
			out[p] = -1 // a group that never committed
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: offsets of group %s: %w", group, err)
	}
	for _, p := range parts {
		out[p] = -1
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			out[p] = b.Offset
		}
	}
	return out, nil
}

func firstTimestamp(ctx context.Context, c sarama.Consumer, topic string, p int32, offset int64) (time.Time, error) {
	pc, err := c.ConsumePartition(topic, p, offset)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = pc.Close() }()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case cm := <-pc.Messages():
		return cm.Timestamp, nil
	case err := <-pc.Errors():
		return time.Time{}, err
	case <-timer.C:
		return time.Time{}, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

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
		oldest, err := t.client.GetOffset(r.Topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: reset %s/%d: %w", r.Topic, p, err)
		}
		end, err := t.client.GetOffset(r.Topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka: reset %s/%d: %w", r.Topic, p, err)
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
