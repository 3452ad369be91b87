package memory

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/ferrymq/ferry/transport"
)

// defaultOpener is registered for [Scheme] in init: it holds the process's
// named brokers, and is this package's only package-level state.
var defaultOpener = new(URLOpener)

func init() { transport.Register(Scheme, defaultOpener) }

// URL query keys, each mapping to one [Option].
const (
	keyPartitions = "partitions"
	keyRetention  = "retention"
	keyMaxPayload = "max_payload"
)

// URLOpener opens memory URLs, memory://name?key=value&…, on named brokers
// that it keeps: every Open of the same name, in any part of the program,
// reaches the same [Broker], so a publisher and a subscriber opened by URL
// share topics and messages. Each Open returns its own [Conn], whose Close
// leaves the Broker running; a named Broker lives as long as its URLOpener
// (for the one registered in init, the process), unless it is closed with
// [Broker.Close] (reached through [Conn.Broker]): the next Open of the name
// then makes a fresh one. The query keys are listed
// in the package documentation. The first Open of a name creates its Broker
// with the URL's settings; a later Open of the name may repeat them or leave
// them out, and is an error if it asks for a different value.
//
// The zero value is ready to use; tests may use their own with a private
// [transport.Mux]. It is safe for concurrent use.
type URLOpener struct {
	mu      sync.Mutex
	brokers map[string]*Broker
}

var _ transport.Opener = (*URLOpener)(nil)

// OpenURL returns a new [Conn] on the Broker named by u's host, creating it
// on first use. ctx is not used.
func (o *URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	if !strings.EqualFold(u.Scheme, Scheme) {
		return nil, fmt.Errorf("%w: memory: scheme %q is not %q", transport.ErrInvalidOption, u.Scheme, Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: memory: URLs take no user or password", transport.ErrInvalidOption)
	}
	name := u.Host
	if u.Opaque != "" {
		name = u.Opaque
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: memory: unexpected path %q: the broker name is the host, memory://name",
			transport.ErrInvalidOption, u.Path)
	}
	q := u.Query()
	flat := make(map[string]string, len(q))
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, fmt.Errorf("%w: memory: query key %q given %d times", transport.ErrInvalidOption, k, len(vs))
		}
		flat[k] = vs[0]
	}
	if err := transport.UnknownKeys(Scheme, flat, keyPartitions, keyRetention, keyMaxPayload); err != nil {
		return nil, err
	}
	var opts []Option
	for _, k := range []string{keyPartitions, keyRetention, keyMaxPayload} {
		v, ok := flat[k]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: memory: %s=%q is not an integer", transport.ErrInvalidOption, k, v)
		}
		switch k {
		case keyPartitions:
			opts = append(opts, Partitions(n))
		case keyRetention:
			opts = append(opts, Retention(n))
		case keyMaxPayload:
			opts = append(opts, MaxPayload(n))
		}
	}
	cfg := newConfig(opts...)
	if cfg.err != nil {
		return nil, cfg.err
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.brokers[name]
	if b == nil || b.closed.Load() {
		b = newBroker(cfg)
		if o.brokers == nil {
			o.brokers = make(map[string]*Broker)
		}
		o.brokers[name] = b
		return b.Connect(), nil
	}
	for k := range flat {
		var want, have int
		switch k {
		case keyPartitions:
			want, have = cfg.partitions, b.cfg.partitions
		case keyRetention:
			want, have = cfg.retention, b.cfg.retention
		case keyMaxPayload:
			want, have = cfg.maxPayload, b.cfg.maxPayload
		}
		if want != have {
			return nil, fmt.Errorf("%w: memory: broker %q is already open with %s=%d, not %d",
				transport.ErrInvalidOption, name, k, have, want)
		}
	}
	return b.Connect(), nil
}
