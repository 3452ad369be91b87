package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// ErrNoUpstream is wrapped by the errors of a [Lazy] publisher whose
// upstream could not be opened yet: nothing was sent. A Buffer retries.
var ErrNoUpstream = errors.New("forward: upstream not open")

// Lazy returns a Publisher that opens its upstream with open when it is
// first used, and again on each use until open succeeds; until then
// Publish fails with an error wrapping [ErrNoUpstream]. Put it behind a
// Buffer when the uplink may be down as the program starts: transports
// connect in their constructor (mqtt.New fails while the broker is
// unreachable), and the Buffer must take messages anyway. It is a
// [transport.AsyncPublisher] (so a Buffer forwards through a window):
// with an upstream that is one it passes calls on, with any other it
// publishes one message at a time. open is called with the context of
// the call that needs the upstream, never twice at once.
func Lazy(open func(ctx context.Context) (transport.Publisher, error)) *LazyPublisher {
	return &LazyPublisher{open: open}
}

// LazyPublisher is the Publisher [Lazy] returns. Its methods may be
// called concurrently.
type LazyPublisher struct {
	open   func(ctx context.Context) (transport.Publisher, error)
	mu     sync.Mutex
	p      transport.Publisher
	closed bool
}

var (
	_ transport.Publisher      = (*LazyPublisher)(nil)
	_ transport.AsyncPublisher = (*LazyPublisher)(nil)
)

// get returns the upstream, opening it if it is not open yet.
func (l *LazyPublisher) get(ctx context.Context) (transport.Publisher, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return nil, fmt.Errorf("forward: upstream: %w", transport.ErrClosed)
	case l.p != nil:
		return l.p, nil
	}
	p, err := l.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoUpstream, err)
	}
	l.p = p
	return p, nil
}

// Publish opens the upstream if needed and publishes m there.
func (l *LazyPublisher) Publish(ctx context.Context, m *handler.Message) error {
	p, err := l.get(ctx)
	if err != nil {
		return err
	}
	return p.Publish(ctx, m)
}

// PublishAsync opens the upstream if needed and hands m to it: through
// its PublishAsync when it has one, or else by publishing m now and
// calling done before returning. If the upstream cannot be opened, m is
// not accepted: the error wraps ErrNoUpstream and done is not called.
func (l *LazyPublisher) PublishAsync(ctx context.Context, m *handler.Message, done func(error)) error {
	p, err := l.get(ctx)
	if err != nil {
		return err
	}
	if ap, ok := p.(transport.AsyncPublisher); ok {
		return ap.PublishAsync(ctx, m, done)
	}
	done(p.Publish(ctx, m))
	return nil
}

// Flush waits for the upstream's accepted messages, if it is open and an
// AsyncPublisher.
func (l *LazyPublisher) Flush(ctx context.Context) error {
	l.mu.Lock()
	p := l.p
	l.mu.Unlock()
	if ap, ok := p.(transport.AsyncPublisher); ok {
		return ap.Flush(ctx)
	}
	return nil
}

// Upstream returns the upstream if it is open, or nil.
func (l *LazyPublisher) Upstream() transport.Publisher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p
}

// Close closes the upstream if it was opened; later calls fail with
// transport.ErrClosed.
func (l *LazyPublisher) Close(ctx context.Context) error {
	l.mu.Lock()
	p := l.p
	l.closed, l.p = true, nil
	l.mu.Unlock()
	if p != nil {
		return p.Close(ctx)
	}
	return nil
}
