package mqtt

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/transport"
)

func init() {
	transport.Register(Scheme, new(URLOpener))
	transport.Register(SchemeTLS, new(URLOpener))
}

// URL query keys, each mapping to one [Option].
const (
	keyClientID       = "client_id"
	keyKeepAlive      = "keepalive"
	keyConnectTimeout = "connect_timeout"
	keyReconnectMax   = "reconnect_max"
	keyRetain         = "retain"
	keyFormat         = "format"
	keyID             = "id"
	keyKey            = "key"
	keyDLQPrefix      = "dlq_prefix"
	keyMaxPayload     = "max_payload"
	keyRemoveSessions = "remove_sessions"
	keyCA             = "ca"
	keyCert           = "cert"
	keyKeyFile        = "key_file"
)

var urlKeys = []string{
	keyClientID, keyKeepAlive, keyConnectTimeout, keyReconnectMax, keyRetain, keyFormat,
	keyID, keyKey, keyDLQPrefix, keyMaxPayload, keyRemoveSessions, keyCA, keyCert, keyKeyFile,
}

// URLOpener opens mqtt://[user:password@]host[:port][?key=value&…] (TCP,
// port 1883 by default) and mqtts://… (TLS, port 8883 by default) URLs
// with [New]. The query keys are listed in the package documentation. It is
// safe for concurrent use; its zero value is ready to use.
type URLOpener struct {
	// Options are applied before those the URL sets, so the URL wins.
	Options []Option
}

var _ transport.Opener = (*URLOpener)(nil)

// OpenURL connects to the broker u names; ctx bounds the connection.
func (o *URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	scheme := strings.ToLower(u.Scheme)
	if scheme != Scheme && scheme != SchemeTLS {
		return nil, fmt.Errorf("%w: mqtt: scheme %q is not %q or %q", transport.ErrInvalidOption, u.Scheme, Scheme, SchemeTLS)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: mqtt: no host: want %s://host:port", transport.ErrInvalidOption, scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: mqtt: unexpected path %q", transport.ErrInvalidOption, u.Path)
	}
	opts, err := urlOptions(u)
	if err != nil {
		return nil, err
	}
	broker := "tcp://" + u.Host
	if scheme == SchemeTLS {
		broker = "ssl://" + u.Host
	}
	return New(ctx, broker, append(append([]Option(nil), o.Options...), opts...)...)
}

// urlOptions turns u's user information and query into options.
func urlOptions(u *url.URL) ([]Option, error) {
	var opts []Option
	if u.User != nil {
		pw, _ := u.User.Password()
		opts = append(opts, Credentials(u.User.Username(), pw))
	}
	q := u.Query()
	flat := make(map[string]string, len(q))
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, fmt.Errorf("%w: mqtt: query key %q given %d times", transport.ErrInvalidOption, k, len(vs))
		}
		flat[k] = vs[0]
	}
	if err := transport.UnknownKeys(Scheme, flat, urlKeys...); err != nil {
		return nil, err
	}
	bad := func(k, v, want string) error {
		return fmt.Errorf("%w: mqtt: %s=%q: want %s", transport.ErrInvalidOption, k, v, want)
	}
	dur := func(k, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, bad(k, v, "a duration such as 30s")
		}
		return d, nil
	}
	for _, k := range urlKeys {
		v, ok := flat[k]
		if !ok {
			continue
		}
		switch k {
		case keyClientID:
			opts = append(opts, ClientID(v))
		case keyKeepAlive, keyConnectTimeout, keyReconnectMax:
			d, err := dur(k, v)
			if err != nil {
				return nil, err
			}
			opts = append(opts, map[string]func(time.Duration) Option{
				keyKeepAlive: KeepAlive, keyConnectTimeout: ConnectTimeout, keyReconnectMax: MaxReconnectInterval,
			}[k](d))
		case keyRetain, keyRemoveSessions:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad(k, v, "true or false")
			}
			if k == keyRetain {
				opts = append(opts, Retain(b))
			} else if b {
				opts = append(opts, RemoveSessionsOnClose())
			}
		case keyFormat:
			switch v {
			case "raw":
				opts = append(opts, PayloadFormat(Raw))
			case "envelope":
				opts = append(opts, PayloadFormat(Envelope))
			default:
				return nil, bad(k, v, "raw or envelope")
			}
		case keyID:
			f, err := parseIDFunc(v)
			if err != nil {
				return nil, fmt.Errorf("%w: mqtt: %v", transport.ErrInvalidOption, err)
			}
			opts = append(opts, IDFrom(f))
		case keyKey:
			f, err := parseKeyFunc(v)
			if err != nil {
				return nil, fmt.Errorf("%w: mqtt: %v", transport.ErrInvalidOption, err)
			}
			opts = append(opts, KeyFrom(f))
		case keyMaxPayload:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, bad(k, v, "a number of bytes")
			}
			opts = append(opts, MaxPayload(n))
		case keyDLQPrefix:
			opts = append(opts, DLQPrefix(v))
		case keyCA:
			opts = append(opts, CAFile(v))
		case keyCert:
			opts = append(opts, ClientCert(v, flat[keyKeyFile]))
		case keyKeyFile:
			if _, ok := flat[keyCert]; !ok {
				return nil, fmt.Errorf("%w: mqtt: key_file without cert", transport.ErrInvalidOption)
			}
		}
	}
	return opts, nil
}
