package handler_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/handler"
)

type OrderPlaced struct {
	OrderID string  `json:"order_id"`
	Total   float64 `json:"total"`
}

func ExampleJSON() {
	h := handler.JSON(func(ctx context.Context, m *handler.Message, o OrderPlaced) error {
		if o.Total <= 0 {
			return handler.Permanentf("order %s: total %.2f is not positive", o.OrderID, o.Total)
		}
		fmt.Printf("reserve stock for %s (%.2f)\n", o.OrderID, o.Total)
		return nil
	})

	ctx := context.Background()
	_ = h.Handle(ctx, &handler.Message{ID: "e1", Payload: []byte(`{"order_id":"o-1","total":42.5}`)})
	err := h.Handle(ctx, &handler.Message{ID: "e2", Payload: []byte(`{"order_id":`)})
	fmt.Println(errors.Is(err, handler.ErrPermanent), err)
	// Output:
	// reserve stock for o-1 (42.50)
	// true permanent: handler: decode message "e2" into handler_test.OrderPlaced: unexpected end of JSON input
}

func ExampleChain() {
	trace := func(name string) handler.Middleware {
		return func(next handler.Handler) handler.Handler {
			return handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next.Handle(ctx, m)
			})
		}
	}
	h := handler.Chain(trace("outer"), trace("inner"))(handler.HandlerFunc(
		func(ctx context.Context, m *handler.Message) error {
			fmt.Println("handle", m.ID)
			return nil
		}))
	_ = h.Handle(context.Background(), &handler.Message{ID: "order-1"})
	// Output:
	// enter outer
	// enter inner
	// handle order-1
	// leave inner
	// leave outer
}
