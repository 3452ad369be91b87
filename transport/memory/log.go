package memory

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ferrymq/ferry/handler"
)

// entry is one stored message: a copy of what the producer published, never
// changed after it is appended (except deleted, under the partition lock).
// Deliveries share its Payload and Headers.
type entry struct {
	id        string
	key       string
	payload   []byte
	headers   map[string]string
	offset    int64
	brokerID  string // "partition/offset", made once at publish
	published int64  // broker clock
	deleted   bool   // tombstone, set by ReplayDLQ; guarded by the partition lock
}

// newEntry copies m's content, so that a publisher reusing its buffers or
// map changes nothing stored.
func newEntry(m *handler.Message, now int64) *entry {
	e := &entry{id: m.ID, key: m.Key, published: now}
	if len(m.Payload) > 0 {
		e.payload = append(make([]byte, 0, len(m.Payload)), m.Payload...)
	} else if m.Payload != nil {
		e.payload = []byte{}
	}
	if len(m.Headers) > 0 {
		e.headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			e.headers[k] = v
		}
	}
	return e
}

// message returns a deep copy of e as a Message of topic, with the facts a
// reader (ListDLQ) can know.
func (e *entry) message(b *broker, topic string, part int32) *handler.Message {
	m := &handler.Message{ID: e.id, Key: e.key, Topic: topic}
	if e.payload != nil {
		m.Payload = append([]byte(nil), e.payload...)
	}
	if e.headers != nil {
		m.Headers = make(map[string]string, len(e.headers))
		for k, v := range e.headers {
			m.Headers[k] = v
		}
	}
	m.SetFacts(handler.Facts{
		Transport:   Scheme,
		Partition:   part,
		Offset:      e.offset,
		BrokerID:    e.brokerID,
		PublishedAt: b.time(e.published),
	})
	return m
}

// partition is one append-only log of a topic, with the delivery state of
// every group on it. Its mutex guards the log and all of that state: the
// per-message path (publish, receive, ack, nack) takes this lock and no
// other.
type partition struct {
	mu    sync.Mutex
	t     *topic
	index int32

	// log is a ring of the retained entries, offsets [start, end); its
	// length is a power of two, and entry o sits at o & (len-1).
	log   []*entry
	start int64
	end   atomic.Int64 // written under mu; read without it as a hint

	deleted int          // tombstoned entries in [start, end)
	gps     []*groupPart // the state of each group on this partition

	// ids holds the BrokerIDs of offsets [idsBase, idsBase+idChunk),
	// concatenated, made in one allocation; idPos[i] is where the i-th
	// starts. Entries take substrings of it.
	ids     string
	idsBase int64
	idPos   [idChunk + 1]uint16

	_ [64]byte // keep neighbouring partitions off this cache line
}

func (p *partition) at(off int64) *entry { return p.log[off&int64(len(p.log)-1)] }

// append stores e at the end of the log. When the log then holds more than
// retention entries (0: no limit) it drops the oldest ones that every group
// has received (see trim). Callers hold p.mu.
func (p *partition) append(e *entry, retention int) {
	off := p.end.Load()
	if retention > 0 && off-p.start >= int64(retention) {
		p.trim(off + 1 - int64(retention))
	}
	if off-p.start == int64(len(p.log)) {
		p.grow()
	}
	e.brokerID = p.brokerID(off)
	e.offset = off
	p.log[off&int64(len(p.log)-1)] = e
	p.end.Store(off + 1)
}

// idChunk is how many BrokerIDs partition.brokerID makes at once.
const idChunk = 64

// brokerID returns "partition/off", making the strings for idChunk offsets
// at a time so that publishing does not allocate one per message. Callers
// hold p.mu.
func (p *partition) brokerID(off int64) string {
	if p.ids == "" || off < p.idsBase || off >= p.idsBase+idChunk {
		var buf [idChunk * 26]byte // up to 5 digits, '/', 19 digits, and spare
		b := buf[:0]
		base := off - off%idChunk
		for i := range int64(idChunk) {
			p.idPos[i] = uint16(len(b))
			b = strconv.AppendInt(b, int64(p.index), 10)
			b = append(b, '/')
			b = strconv.AppendInt(b, base+i, 10)
		}
		p.idPos[idChunk] = uint16(len(b))
		p.ids, p.idsBase = string(b), base
	}
	i := off - p.idsBase
	return p.ids[p.idPos[i]:p.idPos[i+1]]
}

// trim drops the entries below to that every group on the partition has
// received. It drops nothing while no group exists, so that a group
// subscribing later with StartAtOldest sees everything published before
// it. Entries delivered and unsettled, or waiting for redelivery, are held
// by their delivery or pending item and stay alive. Callers hold p.mu.
func (p *partition) trim(to int64) {
	if len(p.gps) == 0 {
		return
	}
	for _, gp := range p.gps {
		to = min(to, gp.next.Load())
	}
	mask := int64(len(p.log) - 1)
	for ; p.start < to; p.start++ {
		i := p.start & mask
		if p.deleted > 0 && p.log[i].deleted {
			p.deleted--
		}
		p.log[i] = nil
	}
}

func (p *partition) grow() {
	n := 2 * len(p.log)
	if n == 0 {
		n = 64
	}
	log := make([]*entry, n)
	for o, end := p.start, p.end.Load(); o < end; o++ {
		log[o&int64(n-1)] = p.at(o)
	}
	p.log = log
}

// notify wakes the members that own this partition and wait. Callers hold
// p.mu.
func (p *partition) notify() {
	for _, gp := range p.gps {
		if s := gp.owner; s != nil {
			s.signal()
		}
	}
}

// live counts the entries of [from, end) that are not tombstoned, and
// returns the first of them. Callers hold p.mu.
func (p *partition) live(from int64) (n int64, first *entry) {
	from = max(from, p.start)
	end := p.end.Load()
	if p.deleted == 0 {
		if from < end {
			first = p.at(from)
		}
		return end - from, first
	}
	for o := from; o < end; o++ {
		if e := p.at(o); !e.deleted {
			if first == nil {
				first = e
			}
			n++
		}
	}
	return n, first
}
