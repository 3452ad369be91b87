package kafka

import (
	"runtime"
	"testing"
	"unsafe"
)

var chunkSink []record

// TestRecordChunk holds a record at 256 bytes on 64-bit platforms, and
// admit's chunks of recordChunk records at close to that each once the
// runtime has rounded them up to a size class.
func TestRecordChunk(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit platforms")
	}
	if got := unsafe.Sizeof(record{}); got != 256 {
		t.Fatalf("record is %d bytes, want 256", got)
	}
	const n = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		chunkSink = make([]record, recordChunk)
	}
	runtime.ReadMemStats(&after)
	chunkSink = nil
	if per := float64(after.TotalAlloc-before.TotalAlloc) / n / recordChunk; per > 264 {
		t.Fatalf("a record costs %.0f bytes in chunks of %d, want at most 264", per, recordChunk)
	}
}
