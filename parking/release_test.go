package parking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/memstore"
)

// Release and ReleaseAll check their options and arguments before they
// touch the lot, with the one sentinel.
func TestRelease_invalid(t *testing.T) {
	ctx := context.Background()
	lot, err := memstore.NewLot()
	if err != nil {
		t.Fatal(err)
	}
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	for _, c := range []struct {
		name string
		lot  parking.Lot
		h    handler.Handler
		opts []parking.ReleaseOption
	}{
		{"LockLease(0)", lot, h, []parking.ReleaseOption{parking.LockLease(0)}},
		{"LockLease(1us)", lot, h, []parking.ReleaseOption{parking.LockLease(time.Microsecond)}},
		{"BatchSize(0)", lot, h, []parking.ReleaseOption{parking.BatchSize(0)}},
		{"nil lot", nil, h, nil},
		{"nil handler", lot, nil, []parking.ReleaseOption{parking.BatchSize(5)}},
	} {
		if _, err := parking.Release(ctx, c.lot, "inventory", "o-1", c.h, c.opts...); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("Release with %s = %v, want ErrInvalidOption", c.name, err)
		}
		if _, err := parking.ReleaseAll(ctx, c.lot, "inventory", c.h, c.opts...); !errors.Is(err, handler.ErrInvalidOption) {
			t.Errorf("ReleaseAll with %s = %v, want ErrInvalidOption", c.name, err)
		}
	}
	if parking.ErrInvalidOption != handler.ErrInvalidOption {
		t.Error("parking.ErrInvalidOption is not handler.ErrInvalidOption")
	}
}
