package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/memstore"
	"github.com/ferrymq/ferry/transport"
)

// A chain with Park says it needs per-key order through every middleware
// around it, so the Router refuses it at Add on a stream without order; a
// chain without Park says nothing.
func TestParkChainNeedsOrder(t *testing.T) {
	b := newBroker(t)
	lot := must(memstore.NewLot())
	store := must(memstore.NewStore())
	ok := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	parked := must(middleware.Recommended(b, middleware.Parking(lot), middleware.Deduplicate(store)))(ok)
	plain := must(middleware.Recommended(b, middleware.Deduplicate(store)))(ok)
	if !handler.NeedsOrder(parked) {
		t.Fatal("a Recommended stack with Parking does not say it needs order")
	}
	if handler.NeedsOrder(plain) {
		t.Fatal("a stack without Park says it needs order")
	}
	r := must(ferry.NewRouter())
	noOrder := declaring(b, func(s *transport.Semantics) {
		s.Ordering, s.OrderingHint = transport.OrderNone, "shards=N"
	})
	err := r.Add("inventory", noOrderDeclarer{noOrder}, sub("orders", "inventory"), parked)
	if !errors.Is(err, ferry.ErrInvalidOption) || !strings.Contains(err.Error(), "shards=N") {
		t.Fatalf("Add of a parking chain on a stream without order = %v", err)
	}
	if err := r.Add("email", noOrderDeclarer{noOrder}, sub("orders", "email"), plain); err != nil {
		t.Fatal(err)
	}
}

// noOrderDeclarer declares what its wrapped transport's streams declare.
type noOrderDeclarer struct{ transport.Transport }

func (d noOrderDeclarer) Declare(transport.Subscription) (transport.Semantics, error) {
	return transport.Semantics{Transport: "memory", OrderingHint: "shards=N"}, nil
}

// Park hidden from the Router by a foreign wrapper still refuses, at the
// first message, to park on a stream without order.
func TestParkOnUnorderedStreamIsMisordered(t *testing.T) {
	lot := must(memstore.NewLot())
	called := false
	park := must(middleware.Park(lot))(handler.HandlerFunc(func(context.Context, *handler.Message) error {
		called = true
		return nil
	}))
	hidden := handler.HandlerFunc(park.Handle) // a wrapper that does not forward NeedsOrder
	if handler.NeedsOrder(hidden) {
		t.Fatal("the foreign wrapper forwards NeedsOrder")
	}
	ctx := withSemantics(transport.Semantics{OrderingHint: "shards=N"})
	err := hidden.Handle(ctx, order(t, "orders", "evt-1", "o-1"))
	if !errors.Is(err, middleware.ErrMisordered) || !strings.Contains(err.Error(), "shards=N") || called {
		t.Fatalf("Park on an unordered stream: %v (handler called %v)", err, called)
	}
}
