package pgstore_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/pgstore"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/memory" // or any broker's package
)

// Inventory reserves stock in the same transaction as its dedupe claim,
// and parks a failing order's key in the same database. (It needs
// PostgreSQL, so it compiles without running.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/shop")
	if err != nil {
		log.Fatal(err)
	}
	if err := pgstore.MigrateIdempotency(ctx, pool, pgstore.DefaultIdempotencyTable); err != nil {
		log.Fatal(err)
	}
	if err := pgstore.MigrateParking(ctx, pool, pgstore.DefaultParkingPrefix); err != nil {
		log.Fatal(err)
	}
	inbox, err := pgstore.NewInbox(pool, pgstore.Namespace("inventory"))
	if err != nil {
		log.Fatal(err)
	}
	lot, err := pgstore.NewLot(pool)
	if err != nil {
		log.Fatal(err)
	}
	broker, err := transport.Open(ctx, "memory://shop")
	if err != nil {
		log.Fatal(err)
	}
	stack, err := middleware.Recommended(broker, middleware.Deduplicate(inbox), middleware.Parking(lot))
	if err != nil {
		log.Fatal(err)
	}
	_ = stack(handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		tx, err := pgstore.Tx(ctx) // commits with the claim, or not at all
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE order_id = $1`, m.Key)
		return err
	}))
}
