package middleware

import (
	"context"
	"testing"
)

// TestSlabsNeverHandOutTwice checks the slabs' ownership rule: every
// object taken is new and zero, never one handed out before, so that a
// context a handler kept is never made another message's.
func TestSlabsNeverHandOutTwice(t *testing.T) {
	var p slabs[scope]
	seen := make(map[*scope]bool)
	for i := range 5 * slabSize {
		s := p.take()
		if seen[s] {
			t.Fatalf("take %d returned an object handed out before", i)
		}
		if s.Context != nil || s.bits.Load() != 0 || s.first.parent != nil {
			t.Fatalf("take %d returned an object that is not zero", i)
		}
		seen[s] = true
		s.Context = context.Background()
		s.bits.Store(1)
		s.first.parent = context.Background()
	}
}
