package handler_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// TestBatchResult: a batch's result per message: nil, each message's own
// from BatchErrors, the whole batch's error for any other error, and a
// clear error for a result of the wrong length.
func TestBatchResult(t *testing.T) {
	if handler.BatchErrors(3, map[int]error{1: nil}) != nil {
		t.Error("BatchErrors with no error is not nil")
	}
	bad := errors.New("bad")
	err := handler.BatchErrors(3, map[int]error{1: bad})
	if !errors.Is(err, handler.ErrBatch) || !strings.Contains(err.Error(), "1 of 3 messages") {
		t.Errorf("BatchErrors = %v", err)
	}
	for i, want := range []error{nil, bad, nil} {
		if got := handler.BatchResult(err, i, 3); got != want {
			t.Errorf("BatchResult(%d) = %v, want %v", i, got, want)
		}
	}
	whole := errors.New("db down")
	if got := handler.BatchResult(whole, 2, 3); got != whole {
		t.Errorf("BatchResult of a whole-batch error = %v", got)
	}
	if got := handler.BatchResult(nil, 0, 3); got != nil {
		t.Errorf("BatchResult(nil) = %v", got)
	}
	if got := handler.BatchResult(err, 0, 4); got == nil || !strings.Contains(got.Error(), "3 results for 4 messages") {
		t.Errorf("BatchResult of a result of the wrong length = %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("BatchErrors with an index out of the batch did not panic")
		}
	}()
	_ = handler.BatchErrors(2, map[int]error{2: bad})
}
