package ferry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/routertest"
	"github.com/ferrymq/ferry/transport"
)

// unordered wraps a transport so that it declares no order, with a hint,
// as SQS standard does: a test of the Router's check, not a broker mock.
type unordered struct{ transport.Transport }

func (u unordered) Declare(sub transport.Subscription) (transport.Semantics, error) {
	return transport.Semantics{Transport: "test", OrderingHint: "a .fifo queue"}, nil
}

func (u unordered) Subscribe(ctx context.Context, sub transport.Subscription) (transport.Stream, error) {
	st, err := u.Transport.Subscribe(ctx, sub)
	if err != nil {
		return nil, err
	}
	return unorderedStream{st}, nil
}

type unorderedStream struct{ transport.Stream }

func (unorderedStream) Semantics() transport.Semantics {
	return transport.Semantics{Transport: "test", OrderingHint: "a .fifo queue"}
}

// needsOrder is a chain that says it needs per-key order, as key parking
// does.
type needsOrder struct{ handler.Handler }

func (needsOrder) NeedsOrder() bool { return true }

func TestAddRefusesOrderTheTransportCannotKeep(t *testing.T) {
	tr := unordered{routertest.NewBroker(t, 4)}
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	sub := transport.Subscription{Topic: "orders"}
	for name, tc := range map[string]struct {
		h    handler.Handler
		opts []ferry.SubscriptionOption
		says string
	}{
		"PerKey":     {h, []ferry.SubscriptionOption{ferry.PerKey()}, "asks PerKey"},
		"needsOrder": {needsOrder{h}, nil, "needs per-key order"},
	} {
		r, err := ferry.NewRouter()
		if err != nil {
			t.Fatal(err)
		}
		err = r.Add("inventory", tr, sub, tc.h, tc.opts...)
		if !errors.Is(err, ferry.ErrInvalidOption) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "a .fifo queue") {
			t.Errorf("%s: Add = %v, want ErrInvalidOption saying %q and the hint", name, err, tc.says)
		}
	}
	// A plain handler is fine on a transport without order; a chain that
	// needs order is fine on one that keeps it, unless it asks Unordered.
	r, _ := ferry.NewRouter()
	if err := r.Add("email", tr, sub, h); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("fraud", routertest.NewBroker(t, 4), sub, needsOrder{h}, ferry.Unordered()); !errors.Is(err, ferry.ErrInvalidOption) {
		t.Errorf("a chain that needs order with Unordered: Add = %v, want ErrInvalidOption", err)
	}
	if err := r.Add("inventory", routertest.NewBroker(t, 4), sub, needsOrder{h}, ferry.PerKey()); err != nil {
		t.Fatal(err)
	}
}
