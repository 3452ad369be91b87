package transport

import (
	"context"
	"sync"

	"github.com/ferrymq/ferry/handler"
)

// PublishBatch publishes msgs with p's PublishBatch if it has one, otherwise
// with concurrent Publish calls, so that transports that coalesce concurrent
// publishes still batch. It returns nil when every message was confirmed, or
// a *[BatchError].
func PublishBatch(ctx context.Context, p Publisher, msgs []*handler.Message) error {
	if bp, ok := p.(BatchPublisher); ok {
		return bp.PublishBatch(ctx, msgs)
	}
	if len(msgs) == 1 {
		if err := p.Publish(ctx, msgs[0]); err != nil {
			return &BatchError{Errs: []error{err}}
		}
		return nil
	}
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	failed := false
	var mu sync.Mutex
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Publish(ctx, m); err != nil {
				errs[i] = err
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed {
		return &BatchError{Errs: errs}
	}
	return nil
}
