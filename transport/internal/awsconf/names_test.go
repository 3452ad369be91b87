package awsconf

import (
	"strings"
	"testing"
)

// TestDLQName: a DLQ name is valid for SQS, FIFO exactly when its queue is,
// fits 80 characters, and two long queues that differ only past the cut
// get different DLQs.
func TestDLQName(t *testing.T) {
	long := strings.Repeat("q", 78)
	cases := map[string]string{
		"orders":      "orders-dlq",
		"orders.fifo": "orders-dlq.fifo",
		"a_b-c":       "a_b-c-dlq",
	}
	for q, want := range cases {
		if got := DLQName(q); got != want {
			t.Errorf("DLQName(%q) = %q, want %q", q, got, want)
		}
	}
	for _, q := range []string{long, long[:75] + ".fifo", long + "x", long[:74] + "y.fifo"} {
		d := DLQName(q)
		if !ValidQueueName(d) || IsFIFO(d) != IsFIFO(q) {
			t.Errorf("DLQName(%q) = %q: valid %t, FIFO %t", q, d, ValidQueueName(d), IsFIFO(d))
		}
	}
	if DLQName(long+"a") == DLQName(long+"b") {
		t.Errorf("two long queues share the DLQ %q", DLQName(long+"a"))
	}
}

// TestValidQueueName follows SQS's rule: 1 to 80 of letters, digits, - and
// _, the last five ".fifo" for FIFO.
func TestValidQueueName(t *testing.T) {
	for name, want := range map[string]bool{
		"orders": true, "orders.fifo": true, "a-b_C9": true, strings.Repeat("x", 80): true,
		"": false, ".fifo": false, "orders.dlq": false, "a b": false, strings.Repeat("x", 81): false,
		strings.Repeat("x", 76) + ".fifo": false,
	} {
		if got := ValidQueueName(name); got != want {
			t.Errorf("ValidQueueName(%q) = %t, want %t", name, got, want)
		}
	}
}
