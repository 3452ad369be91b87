package batch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymq/ferry/internal/batch"
)

// A transport coalescing acks: each ack is submitted alone, the broker
// gets them three at a time, and each caller learns its own ack's result.
func Example() {
	ctx := context.Background()
	xack := func(_ context.Context, ids []string) []error {
		fmt.Println("XACK", ids)
		errs := make([]error, len(ids))
		for i, id := range ids {
			if id == "1-4" {
				errs[i] = errors.New("not pending")
			}
		}
		return errs
	}
	acks, err := batch.New(batch.Options{MaxItems: 3, MaxDelay: time.Second}, nil, xack)
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"1-1", "1-2", "1-3", "1-4", "1-5"} {
		_ = acks.Submit(ctx, id, func(err error) {
			if err != nil {
				fmt.Println(id, err)
			}
		})
	}
	_ = acks.Close(ctx) // sends 1-4 and 1-5 at once, without waiting for MaxDelay
	// Output:
	// XACK [1-1 1-2 1-3]
	// XACK [1-4 1-5]
	// 1-4 not pending
}
