package transporttest

import (
	"reflect"
	"testing"

	"github.com/ferrymq/ferry/transport"
)

// TestCoverageListsEveryField: with every field of transport.Semantics
// set, claims lists each one, so that a field added to Semantics without
// a case to prove it fails here first.
func TestCoverageListsEveryField(t *testing.T) {
	sem := transport.Semantics{
		Transport: "x", Ordering: transport.OrderPerKey, OrderingHint: "h", Ack: transport.AckOffset,
		Redelivery: transport.RedeliverOnReconnect, NackDelay: true, Attempts: true, Extend: true,
		NativeDLQ: true, FanOut: true, Replay: true, Headers: true, MaxPayload: 1, RedeliveryDelay: 1, MaxUnsettled: 1,
	}
	listed := make(map[string]bool)
	for _, c := range claims(sem) {
		listed[c.field] = true
	}
	v := reflect.ValueOf(sem)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if v.Field(i).IsZero() {
			t.Errorf("this test leaves Semantics.%s zero: set it", f.Name)
		}
		if !listed[f.Name] {
			t.Errorf("Semantics.%s is not among the claims the suite requires a case to prove", f.Name)
		}
	}
}
