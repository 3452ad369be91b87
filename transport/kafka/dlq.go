package kafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// headerReplayed marks a record appended to a dead-letter topic by
// ReplayDLQ: its value names the replayed record as "partition/offset".
// Kafka cannot delete one record, so a replayed dead letter is hidden by
// this marker instead.
const headerReplayed = "ferry-dlq-replayed"

// DLQName returns the DLQ topic of sub's group: the group (sub.Group, or
// the [Group] option) followed by ".dlq", as [transport.DLQName] names it
// on every transport; sub.Topic + ".dlq" if there is no group. The Router
// passes it to the dead-letter middleware, the stream writes its poison
// records there, and [Transport.ListDLQ] reads it, so the three agree.
func (t *Transport) DLQName(sub transport.Subscription) string {
	group := sub.Group
	if group == "" {
		group = t.cfg.group
	}
	if group == "" {
		return sub.Topic + transport.DLQSuffix
	}
	return group + transport.DLQSuffix
}

// ensureDLQ creates the dead-letter topic dlq of topic, with as many
// partitions as topic, if it does not exist yet. A failure (no permission
// to create topics, say) is logged, not returned: dead-lettering then
// fails loudly at its first write instead.
func (t *Transport) ensureDLQ(topic, dlq string) {
	a, err := t.admin()
	if err != nil {
		t.cfg.logger.Warn("kafka: cannot create the dead-letter topic", "topic", dlq, "err", err)
		return
	}
	n := int32(-1)
	if ps, err := t.client.Partitions(topic); err == nil && len(ps) > 0 {
		n = int32(len(ps))
	}
	err = a.CreateTopic(dlq, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: -1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.cfg.logger.Warn("kafka: cannot create the dead-letter topic", "topic", dlq, "err", err)
	}
}

// deadLetterPoison writes r, a record that cannot be decoded, to the
// stream's DLQ as a permanent failure with no attempt made
// ([transport.NewDeadLetter], Attempts 0), and finishes it, so that the
// commit can pass it. It is called by Receive, once per call: if the write
// fails it returns the error and r stays unfinished, holding the
// partition's commit, until a later Receive writes it. ctx bounds the
// write.
func (s *stream) deadLetterPoison(ctx context.Context, r *record) error {
	p := r.p
	p.mu.Lock()
	pz := p.poison[r]
	p.mu.Unlock()
	m := decodeLoose(pz.cm)
	m.SetFacts(handler.Facts{Transport: Scheme, Group: s.group, Partition: p.id, Offset: r.offset,
		PublishedAt: pz.cm.Timestamp, ReceivedAt: pz.at})
	cause := handler.Permanent(pz.err)
	dl := transport.NewDeadLetter(m, cause, time.Now())
	dl.Attempts = 0 // no handler saw it
	if err := s.publishPoison(ctx, dl.Message(m, s.dlq)); err != nil {
		return fmt.Errorf("kafka: dead-letter the undecodable record %s/%d@%d to %s; the partition's commit holds at it until a later Receive writes it: %w",
			p.topic, p.id, r.offset, s.dlq, err)
	}
	s.cfg.logger.Warn("kafka: poison record sent to the dead-letter topic", "topic", p.topic,
		"partition", p.id, "offset", r.offset, "dlq", s.dlq, "err", pz.err)
	p.mu.Lock()
	delete(p.poison, r)
	p.mu.Unlock()
	// A partition revoked meanwhile refuses: its next owner reads the
	// record again and dead-letters it again (a duplicate, never a loss).
	_ = p.finish(r)
	return nil
}

// publishPoison publishes dl, the dead letter of a poison record. If it
// is too large (the dead-letter record's headers pushed a record near the
// limit over it), it publishes it without its payload instead, marked with
// the truncation record ([transport.HeaderTruncated], the original size
// and SHA-256), and logs a warning: the original stays at its offset,
// which the dead letter names, and the partition's commit is not held for
// ever. Any other error is returned.
func (s *stream) publishPoison(ctx context.Context, dl *handler.Message) error {
	err := s.t.prod.publish(ctx, dl)
	if !errors.Is(err, transport.ErrTooLarge) {
		return err
	}
	sum := sha256.Sum256(dl.Payload)
	c := &handler.Message{ID: dl.ID, Key: dl.Key, Topic: dl.Topic, Headers: maps.Clone(dl.Headers)}
	c.Headers[transport.HeaderTruncated] = "true"
	c.Headers[transport.HeaderOriginalSize] = strconv.Itoa(len(dl.Payload))
	c.Headers[transport.HeaderOriginalSHA256] = hex.EncodeToString(sum[:])
	if err2 := s.t.prod.publish(ctx, c); err2 != nil {
		return fmt.Errorf("%w; without its payload: %w", err, err2)
	}
	s.cfg.logger.Warn("kafka: the dead letter of a poison record was too large; dead-lettered it without its payload",
		"dlq", dl.Topic, "id", dl.ID, "original_size", len(dl.Payload), "err", err)
	return nil
}

// decodeLoose decodes what it can of a record that decode refused, for its
// dead letter: the record key, the first ferry-id (else the last
// _watermill_message_uuid) as ID, and the first value of every other
// header. A header name that is not UTF-8 is kept with its invalid bytes
// replaced by U+FFFD, so that the dead letter can be published; the
// original record stays at its offset, which the dead letter names.
func decodeLoose(cm *sarama.ConsumerMessage) *handler.Message {
	m := &handler.Message{Topic: cm.Topic, Payload: cm.Value}
	if cm.Key != nil {
		m.Key = string(cm.Key)
	}
	if id := idBytes(cm); id != nil {
		m.ID = string(id)
	}
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		k := string(h.Key)
		if k == transport.HeaderID || k == headerWatermillID {
			continue
		}
		if !utf8.ValidString(k) {
			k = strings.ToValidUTF8(k, "\uFFFD")
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(cm.Headers))
		}
		if _, dup := m.Headers[k]; !dup {
			m.Headers[k] = string(h.Value)
		}
	}
	return m
}

// ListDLQ returns up to limit messages of the dead-letter topic dlq (such
// as "orders.dlq"), oldest first by record timestamp, skipping those
// already replayed. Nothing is consumed or committed. Each message's Facts
// carry its partition and offset in dlq. It reads the whole topic up to
// its current end, so it costs one pass over the DLQ.
func (t *Transport) ListDLQ(ctx context.Context, dlq string, limit int) ([]*handler.Message, error) {
	msgs, err := awaitCtx(ctx, "list "+dlq, func() ([]*handler.Message, error) { return t.readDLQ(ctx, dlq) })
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
		oldest, end, err := t.bounds("read", dlq, p)
		if err != nil {
			return nil, err
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
