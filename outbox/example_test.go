package outbox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/memory"
)

// The checkout writes the order row and OrderPlaced in one transaction; a
// relay publishes. (It needs PostgreSQL, so it compiles without running.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/shop")
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(ctx, pool, outbox.DefaultTable); err != nil {
		log.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders (order_id, total) VALUES ($1, $2)`, "o-1", 42.5); err != nil {
		log.Fatal(err)
	}
	placed := &handler.Message{ID: "evt-o-1", Key: "o-1", Topic: "orders", Payload: []byte(`{"order_id":"o-1","total":42.5}`)}
	if err := outbox.Add(ctx, tx, placed); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	broker, err := transport.Open(ctx, "memory://shop")
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, broker, outbox.OnStats(0, func(s outbox.Stats) {
		fmt.Printf("outbox: %d pending, oldest %s\n", s.Pending, s.OldestPending)
	}))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(relay.Run(ctx))
}
