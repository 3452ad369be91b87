package kafka

import (
	"maps"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
)

// ConsumeClaim moves one partition's records into the stream, keeping at
// most window of them past the committed offset, and handles the
// partition's revocation. Records in the window go to Receive in batches,
// one channel operation per batch.
//
// When the window is full it stops reading claim.Messages, as a raw
// consumer slower than its fetches would: sarama fetches all the
// partitions of a broker together and waits for each to take its share,
// so the fetches slow down to the pace of the handlers. If the window stays
// full for half of sarama's MaxProcessingTime (a stuck or slow message at
// its head), the partition is paused instead and what sarama had already
// fetched for it is read into memory, so that the other partitions'
// fetches go on; it resumes once the window has a quarter of its room
// again. Pausing at once would be worse: sarama sleeps 100ms whenever
// every partition it fetches is paused.
func (s *stream) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := &partition{
		s:      s,
		sess:   sess,
		topic:  claim.Topic(),
		id:     claim.Partition(),
		mark:   -1,
		marked: -1,
		space:  make(chan struct{}, 1),
		stop:   make(chan struct{}),
		idle:   make(chan struct{}, 1),
	}
	s.mu.Lock()
	s.claimed++
	ready := s.claimed >= s.want
	s.mu.Unlock()
	if ready {
		s.once.Do(func() { close(s.ready) })
	}
	var (
		msgs    = claim.Messages()
		ctx     = sess.Context()
		waiting []*sarama.ConsumerMessage // fetched; the window had no room
		// spare is waiting's first backing array, reused whenever waiting
		// empties, so that a fetch's records are gathered without growing
		// a new slice each time.
		spare  = make([]*sarama.ConsumerMessage, 0, 512)
		batch  []*delivery // in the window, not yet handed to Receive
		paused bool
		tp     = map[string][]int32{p.topic: {p.id}}
		// stuck fires when the window has stayed full for grace.
		stuck   = time.NewTimer(time.Hour)
		grace   = s.client.Config().Consumer.MaxProcessingTime / 2
		stuckOn bool // stuck is running
	)
	stuck.Stop()
	defer stuck.Stop()
	// Finished offsets are marked with sarama a few times per commit
	// interval rather than on every Ack: sarama's MarkOffset takes two
	// locks, one of them shared by the group's partitions.
	marks := time.NewTicker(min(max(s.cfg.commitInterval/4, 5*time.Millisecond), 250*time.Millisecond))
	defer marks.Stop()
	// resumeAt is the room the window must have again before the claim
	// takes more: a quarter of it, so that a full window is refilled many
	// records at a time rather than one by one.
	resumeAt := max(1, s.window/4)
	defer func() {
		if paused { // sarama keeps a pause across reassignments
			s.cg.Resume(tp)
		}
	}()
	for {
		var (
			in     = msgs
			out    chan<- []*delivery
			space  <-chan struct{}
			stuckC <-chan time.Time
		)
		if len(batch) > 0 {
			out = s.out
		}
		if len(waiting) > 0 || paused {
			space = p.space
		}
		if len(waiting) > 0 && !paused {
			in, stuckC = nil, stuck.C // let sarama wait for us
		}
		select {
		case rec, ok := <-in:
			if !ok {
				p.dropAll(len(batch))
				p.release()
				return nil
			}
			waiting = append(waiting, rec)
			// Take what is already buffered too, without blocking.
		drain:
			for range 256 {
				select {
				case rec, ok := <-msgs:
					if !ok {
						break drain // seen again by the select above
					}
					waiting = append(waiting, rec)
				default:
					break drain
				}
			}
		case out <- batch:
			batch = nil
			continue
		case <-space:
		case <-marks.C:
			p.markNow()
			continue
		case <-stuckC:
			s.cg.Pause(tp) // fetch the others; read what sarama holds
			paused, stuckOn = true, false
			continue
		case <-ctx.Done():
			p.dropAll(len(batch))
			p.release()
			return nil
		case <-s.closing:
			p.dropAll(len(batch))
			p.release()
			return nil
		}
		if len(waiting) > 0 {
			n := p.admit(waiting, &batch, resumeAt)
			clear(waiting[:n])
			if waiting = waiting[n:]; len(waiting) == 0 {
				waiting = spare[:0] // the taken ones were cleared: it holds no record
				if stuckOn {
					stuck.Stop()
					stuckOn = false
				}
			} else if !paused && (n > 0 || !stuckOn) {
				stuck.Reset(grace) // the window filled, or moved and filled again
				stuckOn = true
			}
		}
		if paused && len(waiting) == 0 && p.hasRoom(resumeAt) {
			s.cg.Resume(tp)
			paused = false
		}
	}
}

// admit enters the first records of recs in the window, as many as it has
// room for, and appends their first deliveries to batch. A record that
// cannot be decoded (poison) goes into batch too, as a delivery of attempt
// 0 that Receive dead-letters instead of handing it out. admit returns how
// many it took. When it could not take them all, finish signals p.space
// once the window has room for need more, or for all the rest if fewer.
func (p *partition) admit(recs []*sarama.ConsumerMessage, batch *[]*delivery, need int) (taken int) {
	now := time.Now()
	p.mu.Lock()
	taken = max(0, min(p.s.window-(len(p.queue)-p.head), len(recs)))
	p.need = min(need, len(recs)-taken) // 0 when all were taken
	p.mu.Unlock()
	if taken == 0 {
		return 0
	}
	strs := newArena(recs[:taken]) // one allocation for their keys and IDs
	var (
		poison map[*record]poisoned
		rs     []record // the current chunk
		from   = len(*batch)
	)
	*batch = slices.Grow(*batch, taken) // at most one allocation for them all
	for i, cm := range recs[:taken] {
		if len(rs) == 0 {
			rs = make([]record, min(recordChunk, taken-i))
		}
		r := &rs[0]
		rs = rs[1:]
		r.p, r.offset, r.attempt = p, cm.Offset, 1
		r.first.rec, r.first.attempt = r, 1
		if err := decodeWith(cm, &r.msg, strs.str); err != nil {
			r.first.attempt = 0 // never handed out: Receive dead-letters it
			if poison == nil {
				poison = map[*record]poisoned{}
			}
			poison[r] = poisoned{cm: cm, err: err, at: now}
		} else {
			r.msg.SetFacts(handler.Facts{
				Attempt:     1,
				Transport:   Scheme,
				Partition:   p.id,
				Offset:      cm.Offset,
				PublishedAt: cm.Timestamp,
				ReceivedAt:  now,
			})
		}
		*batch = append(*batch, &r.first)
	}
	p.mu.Lock()
	for _, d := range (*batch)[from:] { // the records just taken, in offset order
		p.queue = append(p.queue, d.rec)
	}
	p.undone += taken
	if poison != nil {
		if p.poison == nil {
			p.poison = poison
		} else {
			maps.Copy(p.poison, poison)
		}
	}
	p.mu.Unlock()
	return taken
}

// recordChunk is how many records admit allocates together: 26 of 256
// bytes, plus the 8-byte header the runtime puts before an object with
// pointers over 512 bytes, make 6664 bytes in the 6784-byte size class, so
// a record costs 261 bytes (16 of them took 4104 bytes, rounded up to
// 4864: 304 each). TestRecordChunk holds it. One allocation for a whole
// fetch (hundreds of records) would be a large object, given fresh zeroed
// pages each time; chunks this size reuse the heap's small-object spans.
const recordChunk = 26
