package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymq/ferry/handler"
)

type scopeKey struct{}

// scope is the context the outermost middleware of this package puts
// around a message's call, once. Between this package's own middleware
// the layers entered go as an argument (see call); where the call passes
// through a handler not of this package, they are published in the
// scope's bits, for any middleware of this package that it calls in turn.
// The bits are atomic so that a handler fanning out to concurrent inner
// calls cannot race on them.
//
// It also carries the deadline context of the first [Timeout] call made
// inside it (see call.fresh), so that one object covers the whole stack's
// success path; Timeout takes any further one (the later attempts of a
// retried message) from its own slabs. Scopes come from slabs too (see
// slabs): a message through the recommended stack costs no allocation of
// its own.
type scope struct {
	context.Context
	bits  atomic.Uint32
	first deadlineCtx
}

// Value answers for the scope and delegates everything else, so that the
// context package still finds the parent's cancellation.
func (s *scope) Value(k any) any {
	if _, ok := k.(scopeKey); ok {
		return s
	}
	return s.Context.Value(k)
}

// call is what a middleware of this package knows of the call it serves,
// and hands the next one when it calls it directly (see pass). With the
// other arguments of serve it fits in registers.
type call struct {
	sc *scope
	// start is the attempt's start on the clock of the Timeout that Retry
	// calls directly, set by that Retry for it (see clock); 0 elsewhere.
	start int64
	outer layer // the layers outside the middleware serving the call
	// fresh says that sc was made for this call and its first deadline
	// context is unused: only the first Timeout reached by direct calls
	// from sc's maker takes it. A middleware that passes the call on more
	// than once (Retry) passes fresh only the first time.
	fresh bool
}

// server is a middleware of this package that can be called directly,
// with the call, rather than through Handle.
type server interface {
	handler.Handler
	serve(ctx context.Context, m *handler.Message, c call) error
}

// link is how a middleware of this package, whose layer is l, calls the
// next handler: next, and next again as a server if it is one of this
// package's middleware.
type link struct {
	next   handler.Handler
	direct server
	l      layer
}

func linkTo(next handler.Handler, l layer) link {
	s, _ := next.(server)
	return link{next: next, direct: s, l: l}
}

// begin starts serving a call that came through Handle: in ctx's scope,
// whose bits say what is outside, or in a new scope taken from fresh (the
// calling middleware's slabs), which is then the returned context.
func begin(ctx context.Context, fresh *slabs[scope]) (context.Context, call) {
	if s, ok := ctx.Value(scopeKey{}).(*scope); ok {
		return ctx, call{sc: s, outer: layer(s.bits.Load())}
	}
	s := fresh.take()
	s.Context = ctx
	return s, call{sc: s, fresh: true}
}

// pass calls the next handler for the middleware serving c, adding its
// layer: directly if it is of this package, with the layers as an
// argument; else through its Handle (see foreign).
func (c call) pass(ctx context.Context, m *handler.Message, to *link) error {
	c.outer |= to.l
	if to.direct != nil {
		return to.direct.serve(ctx, m, c)
	}
	return c.foreign(ctx, m, to.next)
}

// foreign calls next, a handler not of this package, with the layers in
// the scope's bits meanwhile.
func (c call) foreign(ctx context.Context, m *handler.Message, next handler.Handler) error {
	prev := c.sc.bits.Swap(uint32(c.outer))
	defer c.sc.bits.Store(prev)
	return next.Handle(ctx, m)
}

// enter records that l is entered on ctx's scope, as begin and foreign
// do together, for a middleware that calls the next one only through
// Handle: it returns the context (a new scope if ctx had none), the layers
// outside, and the scope, whose leave the caller defers.
func enter(ctx context.Context, l layer, fresh *slabs[scope]) (context.Context, layer, *scope) {
	ctx, c := begin(ctx, fresh)
	c.sc.bits.Store(uint32(c.outer | l))
	return ctx, c.outer, c.sc
}

// leave restores the layers to those outside.
func (s *scope) leave(outer layer) { s.bits.Store(uint32(outer)) }

// deadlineCtx returns an unused deadline context for one call of
// [Timeout]: the scope's own if the call is fresh, else one from more.
func (c call) deadlineCtx(more *slabs[deadlineCtx]) *deadlineCtx {
	if c.fresh {
		return &c.sc.first
	}
	return more.take()
}

// clock reads the monotonic clock as nanoseconds since its base, plus one
// (so that a reading is never 0): one clock read, where time.Now makes two
// (the wall clock and the monotonic one). A reading turns into a
// time.Time, base plus the reading, only where one is needed; it carries
// a monotonic reading, which comparisons and durations use, so they are
// exact, and only its wall clock part does not follow a step of the
// system clock after base (as the memory transport's and the Router's
// clocks). Retry uses the clock of the Timeout it calls directly, so that
// it can give it its attempt's start.
type clock struct{ base time.Time }

func newClock() *clock { return &clock{base: time.Now()} }

func (c *clock) now() int64 { return int64(time.Since(c.base)) + 1 }

func (c *clock) time(t int64) time.Time { return c.base.Add(time.Duration(t - 1)) }

// slabSize is how many objects one allocation of a slab makes.
const slabSize = 64

// slabs hands out new objects of type T, made slabSize at a time, so that
// the per-message path does not allocate one each (as the memory transport
// makes its broker IDs). The objects are zero when handed out, each is
// handed out once, and none is ever reset or handed out again.
//
// That is the ownership rule, and it is why these are not pooled and
// reused per message: a handler may keep its context after it returns (a
// goroutine started with it, an errgroup's), and that context must still
// report that it ended, with its own deadline and its own message's values
// (the dedupe transaction, the stream), however many messages come after.
// A reused object would come back to life as another message's context.
// What a kept context costs instead is its slab's memory (slabSize objects
// of under 100 bytes) for as long as it is kept.
//
// The slab being filled sits in a sync.Pool, which keeps one per P, so
// that take takes no lock shared by the workers; a slab the pool drops at
// a garbage collection leaves its unused objects to the collector.
type slabs[T any] struct{ pool sync.Pool }

type slab[T any] struct {
	next  int
	items [slabSize]T
}

// take returns a new, zero T.
func (p *slabs[T]) take() *T {
	s, _ := p.pool.Get().(*slab[T])
	if s == nil {
		s = new(slab[T])
	}
	t := &s.items[s.next]
	if s.next++; s.next < slabSize {
		p.pool.Put(s)
	}
	return t
}
