package memory

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/ferrymq/ferry/transport"
)

func init() { transport.Register(Scheme, new(URLOpener)) }

// URL query keys, each mapping to one [Option].
const (
	keyPartitions = "partitions"
	keyRetention  = "retention"
	keyMaxPayload = "max_payload"
)

// parse reads rawURL's settings into a config, then applies opts: the one
// path by which [New] and [URLOpener] configure a broker.
func parse(rawURL string, opts []Option) (config, error) {
	cfg := defaultConfig()
	u, err := transport.ParseURL("memory", rawURL, Scheme)
	if err != nil {
		return cfg, err
	}
	if u.User != nil {
		return cfg, fmt.Errorf("%w: memory: URLs take no user or password", transport.ErrInvalidOption)
	}
	if u.Path != "" && u.Path != "/" {
		return cfg, fmt.Errorf("%w: memory: unexpected path %q: the broker name is the host, memory://name",
			transport.ErrInvalidOption, u.Path)
	}
	q := transport.ParseQuery(Scheme, u.RawQuery)
	for _, o := range transport.Options(q,
		transport.IntKey(keyPartitions, Partitions),
		transport.IntKey(keyRetention, Retention),
		transport.IntKey(keyMaxPayload, MaxPayload)) {
		o.apply(&cfg)
	}
	if err := q.Err(); err != nil {
		return cfg, err
	}
	for _, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: memory: nil Option", transport.ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	return cfg, cfg.err
}

// brokerName is the broker a URL names: its host (memory://orders), or ""
// for memory://.
func brokerName(u *url.URL) string {
	if u.Opaque != "" {
		return u.Opaque
	}
	return u.Host
}

// URLOpener opens memory URLs, memory://name?key=value&…, on named brokers
// that it keeps: every Open of the same name, in any part of the program,
// reaches the same broker, so a publisher and a subscriber opened by URL
// share topics and messages. Each Open returns its own handle
// ([Transport.Connect]), whose Close leaves the broker running; a named
// broker lives as long as its URLOpener (for the one registered in init, the
// process). The first Open of a name creates its broker with the URL's
// settings; a later Open of the name may repeat them or leave them out, and
// is an error if it asks for a different value.
//
// The zero value is ready to use; tests may use their own with a private
// [transport.Mux]. It is safe for concurrent use.
type URLOpener struct {
	mu      sync.Mutex
	brokers map[string]*broker
}

var _ transport.Opener = (*URLOpener)(nil)

// OpenURL returns a new handle on the broker named by u's host, creating it
// on first use. ctx is not used.
func (o *URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	cfg, err := parse(u.String(), nil)
	if err != nil {
		return nil, err
	}
	name := brokerName(u)
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.brokers[name]
	if b == nil || b.closed.Load() {
		b = newBroker(cfg)
		if o.brokers == nil {
			o.brokers = make(map[string]*broker)
		}
		o.brokers[name] = b
		return b.connect(), nil
	}
	q := u.Query()
	for _, k := range []struct {
		key        string
		want, have int
	}{
		{keyPartitions, cfg.partitions, b.cfg.partitions},
		{keyRetention, cfg.retention, b.cfg.retention},
		{keyMaxPayload, cfg.maxPayload, b.cfg.maxPayload},
	} {
		if q.Has(k.key) && k.want != k.have {
			return nil, fmt.Errorf("%w: memory: broker %q is already open with %s=%d, not %d",
				transport.ErrInvalidOption, name, k.key, k.have, k.want)
		}
	}
	return b.connect(), nil
}
