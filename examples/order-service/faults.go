package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ferrymq/ferry/handler"
)

// The injected faults, chosen so that every number of the summary is
// exact and the same on every broker:
//
//   - a lost ack: every 7th order is handled, and then its acknowledgement
//     is "lost" (the fault middleware returns an error after the effect),
//     so the broker delivers it again, as it would after a consumer crash
//     or a lease that ran out. Inventory, email and (for orders over 500)
//     fraud each see it twice; dedupe skips the second delivery.
//   - a poison order: it asks for a SKU that is out of stock (inventory
//     parks its key until the SKU is restocked, then the parked order is
//     released and reserved) and its mailbox rejects mail (email
//     dead-letters it).
//   - a consumer restart: inventory's Router is restarted while it handles
//     one order; the order, abandoned unacked, is delivered again.
type faults struct {
	on      bool
	poison  int // order number
	restart int // order number
}

// unavailableSKU is what the poison order asks for; it is restocked after
// the key is parked.
const unavailableSKU = "SKU-DISCONTINUED"

// planFaults returns the faults of a run of cfg: none with -faults=false
// or fewer than 4 orders.
func planFaults(cfg config) faults {
	if !cfg.faults || cfg.orders < 4 {
		return faults{}
	}
	f := faults{on: true, poison: 3, restart: 2}
	// The poison order stays under the fraud threshold (fraud would see
	// it otherwise) and is not also a lost ack.
	for newOrder("", f.poison).Total > FraudThreshold || f.poison%7 == 0 {
		f.poison++
	}
	return f
}

// lostAck reports whether order n's first acknowledgement is lost.
func (f faults) lostAck(n int) bool { return f.on && n%7 == 0 && n != f.poison && n != f.restart }

// errLostAck is what the lost-ack fault returns after the effect is done:
// the Router hands the message back to the broker, which delivers it again.
var errLostAck = errors.New("order-service: fault: acknowledgement lost after the effect")

// loseAck is the lost-ack fault, outermost in a subscription's chain: the
// first time an order picked by the plan is handled successfully on sub, it
// returns errLostAck instead of nil.
type loseAck struct {
	mu     sync.Mutex
	fired  map[string]bool // sub + "/" + message ID
	pick   func(m *handler.Message) bool
	onFire func(sub string, m *handler.Message)
}

// wrap returns next with the fault outermost. The wrapper answers
// handler.NeedsOrder for next, as middleware does, so that the Router
// still sees that inventory's chain parks keys.
func (l *loseAck) wrap(sub string, next handler.Handler) handler.Handler {
	return lostAckHandler{l: l, sub: sub, next: next}
}

// lostAckHandler is the fault around one subscription's chain.
type lostAckHandler struct {
	l    *loseAck
	sub  string
	next handler.Handler
}

func (h lostAckHandler) Handle(ctx context.Context, m *handler.Message) error {
	l := h.l
	err := h.next.Handle(ctx, m)
	if err != nil || !l.pick(m) {
		return err
	}
	l.mu.Lock()
	k := h.sub + "/" + m.ID
	first := !l.fired[k]
	l.fired[k] = true
	l.mu.Unlock()
	if !first {
		return nil
	}
	if l.onFire != nil {
		l.onFire(h.sub, m)
	}
	return fmt.Errorf("%w: %s on %s", errLostAck, m.ID, h.sub)
}

// NeedsOrder forwards to the wrapped chain (handler.OrderNeeder).
func (h lostAckHandler) NeedsOrder() bool { return handler.NeedsOrder(h.next) }

// Background forwards to the wrapped chain (handler.Backgrounder), so that
// Park carries out release requests.
func (h lostAckHandler) Background(ctx context.Context, sub string) {
	handler.Background(ctx, h.next, sub)
}

// hasFired reports whether the fault has fired for m's ID on sub.
func (l *loseAck) hasFired(sub, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fired[sub+"/"+id]
}
