package memstore_test

import (
	"context"
	"fmt"

	"github.com/ferrymq/ferry/idempotency"
	"github.com/ferrymq/ferry/store/memstore"
)

// A redelivered OrderPlaced is recognised by its event ID: the first claim
// is new, and once completed a second claim finds it done, with the result
// stored by the first.
func ExampleNewStore() {
	ctx := context.Background()
	store, err := memstore.NewStore()
	if err != nil {
		panic(err)
	}
	first, _ := store.Claim(ctx, "evt-o-7")
	fmt.Println("first delivery:", first.State)
	_ = store.Complete(ctx, "evt-o-7", first.Token, []byte("reservation r-1"))

	again, _ := store.Claim(ctx, "evt-o-7")
	fmt.Println("redelivery:", again.State, string(again.Result))
	fmt.Println(again.State == idempotency.Done)
	// Output:
	// first delivery: new
	// redelivery: done reservation r-1
	// true
}
