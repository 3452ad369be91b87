package transport

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// An Opener opens a Transport from a parsed URL. Each transport package
// exports one (its URLOpener type) and registers it for its scheme in init.
// The URL's query keys map one to one onto the transport's options; an
// unknown key is an error wrapping [ErrInvalidOption] that names it.
type Opener interface {
	OpenURL(ctx context.Context, u *url.URL) (Transport, error)
}

// OpenerFunc adapts a function to an Opener.
type OpenerFunc func(ctx context.Context, u *url.URL) (Transport, error)

// OpenURL calls f(ctx, u).
func (f OpenerFunc) OpenURL(ctx context.Context, u *url.URL) (Transport, error) { return f(ctx, u) }

// Mux maps URL schemes to Openers. The zero value is ready to use; tests use
// their own, programs use the default one through [Register] and [Open].
// Schemes are case-insensitive.
type Mux struct {
	mu      sync.RWMutex
	openers map[string]Opener
}

// Register makes o the Opener for scheme. It panics if scheme is empty, o is
// nil, or the scheme is already registered: all three are programming errors
// that show at start-up, as with database/sql.Register.
func (m *Mux) Register(scheme string, o Opener) {
	scheme = strings.ToLower(scheme)
	if scheme == "" {
		panic("transport: Register with an empty scheme")
	}
	if o == nil {
		panic("transport: Register opener is nil for scheme " + scheme)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.openers[scheme]; dup {
		panic("transport: Register called twice for scheme " + scheme)
	}
	if m.openers == nil {
		m.openers = make(map[string]Opener)
	}
	m.openers[scheme] = o
}

// Schemes returns the registered schemes, sorted.
func (m *Mux) Schemes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.openers))
	for s := range m.openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open parses rawURL and opens it with the Opener registered for its scheme.
// Errors name the URL only as [Redact] prints it: never its user-info or
// query, where credentials live.
func (m *Mux) Open(ctx context.Context, rawURL string) (Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included: do not wrap it.
		return nil, fmt.Errorf("%w: cannot parse transport URL", ErrInvalidOption)
	}
	scheme := strings.ToLower(u.Scheme)
	m.mu.RLock()
	o := m.openers[scheme]
	m.mu.RUnlock()
	if o == nil {
		return nil, fmt.Errorf("%w %q (registered: %s)", ErrUnknownScheme, u.Scheme, strings.Join(m.Schemes(), ", "))
	}
	t, err := o.OpenURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("transport: open %s: %w", Redact(u), err)
	}
	return t, nil
}

// defaultMux is Ferry's only mutable package-level state: the registry that
// transport packages fill from init.
var defaultMux Mux

// Register registers o for scheme on the default Mux. Transport packages call
// it from init; programs choose transports with blank imports.
func Register(scheme string, o Opener) { defaultMux.Register(scheme, o) }

// Schemes returns the schemes registered on the default Mux, sorted.
func Schemes() []string { return defaultMux.Schemes() }

// Open opens a Transport by URL on the default Mux, so that
// FERRY_URL=redis://… or memory:// picks the broker without code changes.
func Open(ctx context.Context, rawURL string) (Transport, error) {
	return defaultMux.Open(ctx, rawURL)
}
