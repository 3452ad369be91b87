package memory

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ferrymq/ferry/transport"
)

// topic is a named set of partitions and the groups consuming it.
type topic struct {
	b     *broker
	name  string
	parts []*partition
	rr    atomic.Uint32 // round-robin for messages without a Key

	// mu guards groups and every group's membership. Lock order: topic.mu,
	// then partition.mu.
	mu     sync.Mutex
	groups map[string]*group
}

func newTopic(b *broker, name string) *topic {
	t := &topic{b: b, name: name, groups: make(map[string]*group)}
	t.parts = make([]*partition, b.cfg.partitions)
	for i := range t.parts {
		t.parts[i] = &partition{t: t, index: int32(i)}
	}
	return t
}

// pick returns the partition for key: FNV-1a (32-bit) of the key modulo the
// partition count, or round-robin for an empty key.
func (t *topic) pick(key string) *partition {
	n := uint32(len(t.parts))
	if key == "" {
		return t.parts[(t.rr.Add(1)-1)%n]
	}
	return t.parts[fnv1a(key)%n]
}

func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// group is a consumer group on one topic: its members and, per partition, its
// delivery state.
type group struct {
	t       *topic
	name    string
	private bool         // made for a Subscription without a Group; ends with its stream
	gps     []*groupPart // one per partition, fixed
	members []*stream    // sorted by name; guarded by t.mu
}

// newGroup makes a group starting at the end of each partition, or at its
// oldest retained message, and attaches it to the partitions. Callers hold
// t.mu.
func (t *topic) newGroup(name string, private, oldest bool) *group {
	g := &group{t: t, name: name, private: private, gps: make([]*groupPart, len(t.parts))}
	for i, p := range t.parts {
		gp := &groupPart{p: p, g: g}
		gp.due.Store(noDue)
		p.mu.Lock()
		if oldest {
			gp.next.Store(p.start)
		} else {
			gp.next.Store(p.end.Load())
		}
		p.gps = append(p.gps, gp)
		p.mu.Unlock()
		g.gps[i] = gp
	}
	return g
}

// detach removes a private group from its partitions once its only stream
// has gone. Callers hold t.mu.
func (g *group) detach() {
	for _, gp := range g.gps {
		p := gp.p
		p.mu.Lock()
		i := slices.Index(p.gps, gp)
		p.gps = slices.Delete(slices.Clone(p.gps), i, i+1)
		gp.pending = nil
		gp.head, gp.tail, gp.outstanding = nil, nil, 0
		p.mu.Unlock()
	}
}

// join adds s to g and rebalances. Callers hold t.mu.
func (g *group) join(s *stream) error {
	if s.closed.Load() {
		return transport.ErrClosed
	}
	i, found := slices.BinarySearchFunc(g.members, s.name, func(m *stream, name string) int {
		return strings.Compare(m.name, name)
	})
	if found {
		return fmt.Errorf("%w: memory: consumer %q is already a member of group %q on topic %q",
			transport.ErrInvalidOption, s.name, g.name, g.t.name)
	}
	g.members = slices.Insert(g.members, i, s)
	g.rebalance()
	return nil
}

// leave removes s from g, if it is a member, and rebalances. Callers hold
// t.mu.
func (g *group) leave(s *stream) {
	i := slices.Index(g.members, s)
	if i < 0 {
		return
	}
	g.members = slices.Delete(g.members, i, i+1)
	g.rebalance()
}

// rebalance assigns partition i to member i mod len(members), in name order:
// deterministic, so the same members always get the same partitions. A
// partition that changes owner has every outstanding delivery revoked and
// queued for immediate redelivery to the new owner, attempt + 1; its pending
// Nacks stay queued with their due times. Callers hold t.mu.
func (g *group) rebalance() {
	n := len(g.members)
	assign := make([][]*groupPart, n)
	for i, gp := range g.gps {
		var owner *stream
		if n > 0 {
			owner = g.members[i%n]
			assign[i%n] = append(assign[i%n], gp)
		}
		p := gp.p
		p.mu.Lock()
		if gp.owner != owner {
			gp.revokeAll()
			gp.owner = owner
		}
		p.mu.Unlock()
	}
	for i, s := range g.members {
		s.assigned.Store(&assign[i])
		s.kick()
	}
}

// noDue marks a groupPart with nothing pending.
const noDue = math.MaxInt64

// groupPart is one group's delivery state on one partition; everything in it
// is guarded by the partition's mutex.
//
// A message is in exactly one of three places until it is acked: not yet
// delivered (offset ≥ next), outstanding (delivered to the owner, unsettled:
// the intrusive list head…tail), or pending (Nacked or revoked, waiting in
// the heap for its due time). Ack unlinks from the list in O(1) and keeps
// nothing, so the state is bounded by what is in flight, not by history.
type groupPart struct {
	p *partition
	g *group

	owner *stream      // the member this partition is assigned to, or nil
	next  atomic.Int64 // next offset to deliver; written under p.mu
	due   atomic.Int64 // earliest due time in pending, or noDue; written under p.mu

	pending     []pendingItem // min-heap by (due, offset)
	head, tail  *delivery     // outstanding deliveries, in delivery order
	outstanding int
}

// pendingItem is a message waiting for redelivery at due (broker clock).
type pendingItem struct {
	e       *entry
	attempt int32 // the attempt its redelivery will be
	due     int64
}

func (a *pendingItem) before(b *pendingItem) bool {
	return a.due < b.due || (a.due == b.due && a.e.offset < b.e.offset)
}

func (gp *groupPart) link(d *delivery) {
	d.prev, d.next = gp.tail, nil
	if gp.tail != nil {
		gp.tail.next = d
	} else {
		gp.head = d
	}
	gp.tail = d
	gp.outstanding++
}

func (gp *groupPart) unlink(d *delivery) {
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		gp.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		gp.tail = d.prev
	}
	d.prev, d.next = nil, nil
	gp.outstanding--
}

// revokeAll takes every outstanding delivery away from the current owner and
// queues it for immediate redelivery, in offset order. A late Ack or Nack on
// a revoked delivery returns an error and changes nothing.
func (gp *groupPart) revokeAll() {
	for d := gp.head; d != nil; {
		next := d.next
		if d.s.closed.Load() {
			d.state = stateClosed
		} else {
			d.state = stateRevoked
		}
		d.prev, d.next = nil, nil
		gp.push(pendingItem{e: d.e, attempt: d.attempt + 1, due: 0})
		d = next
	}
	gp.head, gp.tail, gp.outstanding = nil, nil, 0
}

func (gp *groupPart) push(it pendingItem) {
	h := append(gp.pending, it)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(&h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	gp.pending = h
	gp.due.Store(h[0].due)
}

func (gp *groupPart) pop() pendingItem {
	h := gp.pending
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = pendingItem{}
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h[r].before(&h[l]) {
			c = r
		}
		if !h[c].before(&h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	gp.pending = h
	if len(h) > 0 {
		gp.due.Store(h[0].due)
	} else {
		gp.due.Store(noDue)
	}
	return top
}

// take hands the next message of gp to s in d, if s owns gp and a message is
// ready: a due redelivery first, then the next offset. *now is the broker
// clock, read on first need. Callers hold p.mu.
func (gp *groupPart) take(s *stream, d *delivery, now *int64) bool {
	if gp.owner != s {
		return false
	}
	for len(gp.pending) > 0 {
		if *now < 0 {
			*now = s.b.now()
		}
		if gp.pending[0].due > *now {
			break
		}
		it := gp.pop()
		if it.e.deleted {
			continue
		}
		d.e, d.attempt = it.e, it.attempt
		d.start(gp, s)
		return true
	}
	p := gp.p
	next := gp.next.Load()
	end := p.end.Load()
	for next < end {
		e := p.at(next)
		next++
		if p.deleted > 0 && e.deleted { // read e only if need be: it may be cold
			continue
		}
		gp.next.Store(next)
		d.e, d.attempt = e, 1
		d.start(gp, s)
		return true
	}
	gp.next.Store(next)
	return false
}
