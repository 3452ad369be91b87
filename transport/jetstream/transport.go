package jetstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/ferrymq/ferry/transport"
)

// Scheme is the URL scheme of this transport, registered from init.
const Scheme = "nats"

// A Transport is one NATS connection with JetStream, made by [New] or by
// opening a nats:// URL with [transport.Open]. It publishes to and
// subscribes on the server's streams. It is a [transport.Transport],
// [transport.BatchPublisher], [transport.Declarer], [transport.DLQNamer],
// [transport.DeadLetters] and [transport.LagReporter]; all its methods may
// be called concurrently.
type Transport struct {
	cfg        config
	nc         *nats.Conn
	js         njs.JetStream
	log        *slog.Logger
	maxPayload int
	rr         atomic.Uint64 // round-robin partition of keyless messages

	closed  atomic.Bool
	mu      sync.Mutex
	streams map[*stream]struct{}
	known   sync.Map // topic -> struct{}: a stream captures it

	async     *asyncPub        // PublishAsync's window
	asyncOpts []njs.PublishOpt // PublishAsync's options, made once

	leaseMu  sync.Mutex
	leaseBkt njs.KeyValue // the lease bucket, made on first exclusive Subscribe
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.BatchPublisher = (*Transport)(nil)
	_ transport.Declarer       = (*Transport)(nil)
	_ transport.DLQNamer       = (*Transport)(nil)
	_ transport.DeadLetters    = (*Transport)(nil)
	_ transport.LagReporter    = (*Transport)(nil)
	_ transport.AsyncPublisher = (*Transport)(nil)
)

// ErrAuth is wrapped by the error [New] returns when the server refuses
// the credentials (user and password, token or NKey). The error never
// contains them. Check the credentials; retrying will not help.
var ErrAuth = fmt.Errorf("jetstream: authentication failed: %w", transport.ErrAuth)

// New connects to the NATS server that rawURL names and returns a
// Transport. rawURL is nats://[user[:password]@]host[:port][?key=value…]
// (a user info without a password is a token); see the package doc for
// its query keys, each the same as an [Option]. opts apply after the
// URL's settings.
//
// An invalid URL or option returns an error wrapping
// [transport.ErrInvalidOption] that names it. ctx bounds the connection
// and the check that JetStream is enabled; a server that refuses the
// credentials returns an error wrapping [ErrAuth]. Neither error repeats
// a password, token or seed.
//
// The connection reconnects on its own, without limit, after a network
// failure or a server restart; see the package doc, "Reconnecting".
func New(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	cfg, err := parse(rawURL, opts)
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, log: cfg.log, streams: make(map[*stream]struct{}), async: newAsyncPub(cfg.publishWindow)}
	nopts, err := t.natsOptions(ctx)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect("nats://"+cfg.addr, nopts...)
	if err != nil {
		return nil, t.connectError(err)
	}
	t.nc = nc
	t.asyncOpts = []njs.PublishOpt{njs.WithRetryAttempts(0), njs.WithStallWait(cfg.timeout)}
	t.js, err = njs.New(nc, append(t.handlers(),
		njs.WithDefaultTimeout(cfg.timeout),
		njs.WithPublishAsyncTimeout(cfg.timeout),
		// nats.go's own window is wider than PublishAsync's, so that it
		// never stalls Ferry's publishes; it bounds JetStream()'s users.
		njs.WithPublishAsyncMaxPending(max(cfg.publishWindow, DefaultPublishWindow)))...)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %s: %w", cfg.addr, err)
	}
	actx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if _, err := t.js.AccountInfo(actx); err != nil {
		nc.Close()
		if errors.Is(err, njs.ErrJetStreamNotEnabled) || errors.Is(err, njs.ErrJetStreamNotEnabledForAccount) {
			return nil, fmt.Errorf("jetstream: %s: JetStream is not enabled on the server (start nats-server with -js): %w", cfg.addr, err)
		}
		return nil, fmt.Errorf("jetstream: %s: reading the account's JetStream info: %w", cfg.addr, err)
	}
	server := int(nc.MaxPayload())
	switch {
	case cfg.maxPayload == 0:
		t.maxPayload = max(server-DefaultHeaderRoom, server/2)
	case cfg.maxPayload > server:
		nc.Close()
		return nil, fmt.Errorf("%w: jetstream: MaxPayload(%d) is over the server's max_payload of %d", transport.ErrInvalidOption, cfg.maxPayload, server)
	default:
		t.maxPayload = cfg.maxPayload
	}
	return t, nil
}

// natsOptions turns the configuration into nats.go's options: credentials,
// TLS, the reconnect policy and the logging of connection events.
func (t *Transport) natsOptions(ctx context.Context) ([]nats.Option, error) {
	cfg := t.cfg
	timeout := cfg.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("jetstream: connect %s: %w", cfg.addr, context.DeadlineExceeded)
	}
	log := t.log
	addr := cfg.addr
	o := []nats.Option{
		nats.Timeout(timeout),
		// A write to a server that stopped reading fails after timeout (a
		// second at least, so that a short timeout does not cut a busy link)
		// instead of nats.go's minute.
		nats.FlusherTimeout(max(cfg.timeout, time.Second)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A publish while the connection is down fails at once, as not
		// sent, instead of waiting in a buffer to be sent later.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("jetstream: disconnected; reconnecting", "server", addr, "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("jetstream: reconnected", "server", addr) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("jetstream: connection error", "server", addr, "err", err)
		}),
	}
	if cfg.name != "" {
		o = append(o, nats.Name(cfg.name))
	}
	switch {
	case cfg.user != "":
		o = append(o, nats.UserInfo(cfg.user, cfg.pass))
	case cfg.token != "":
		o = append(o, nats.Token(cfg.token))
	}
	seed := cfg.nkeySeed
	if cfg.nkeyFile != "" {
		b, err := os.ReadFile(cfg.nkeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: jetstream: nkey_seed_file: %w", transport.ErrInvalidOption, err)
		}
		seed = []byte(strings.TrimSpace(string(b)))
	}
	if len(seed) > 0 {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			// nkeys' errors do not repeat the seed.
			return nil, fmt.Errorf("%w: jetstream: the NKey seed is not a valid seed: %w", transport.ErrInvalidOption, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("%w: jetstream: the NKey seed: %w", transport.ErrInvalidOption, err)
		}
		o = append(o, nats.Nkey(pub, kp.Sign))
	}
	if cfg.useTLS {
		tc, err := t.tlsConfig()
		if err != nil {
			return nil, err
		}
		o = append(o, nats.Secure(tc))
	}
	return o, nil
}

// tlsConfig is the TLS configuration: TLSConfig's, or one built from the
// tls_ca, tls_cert and tls_key files, verifying the server's name.
func (t *Transport) tlsConfig() (*tls.Config, error) {
	cfg := t.cfg
	tc := cfg.tls
	if tc == nil {
		var err error
		tc, err = transport.TLSFiles{CA: cfg.tlsCA, Cert: cfg.tlsCert, Key: cfg.tlsKey}.Config()
		if err != nil {
			return nil, fmt.Errorf("jetstream: %w", err)
		}
	}
	if tc.ServerName == "" {
		if host, _, err := net.SplitHostPort(cfg.addr); err == nil {
			tc.ServerName = host
		}
	}
	return tc, nil
}

// connectError names the reason a connection failed, without credentials.
func (t *Transport) connectError(err error) error {
	addr := t.cfg.addr
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return fmt.Errorf("jetstream: connect %s: %w: the server refused the credentials (user and password, token or NKey): %v",
			addr, ErrAuth, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("jetstream: connect %s: no answer from a NATS server within the timeout of %v: %w", addr, t.cfg.timeout, err)
	}
	return fmt.Errorf("jetstream: connect %s: %w", addr, err)
}

// Conn returns the transport's NATS connection, for what Ferry does not
// wrap (stream administration, core NATS). Closing it closes the
// transport's streams' connection too: use [Transport.Close] instead.
func (t *Transport) Conn() *nats.Conn { return t.nc }

// JetStream returns the transport's JetStream context, on [Transport.Conn].
func (t *Transport) JetStream() njs.JetStream { return t.js }

// Close closes every stream the transport opened (releasing their
// unsettled deliveries for redelivery), waits for PublishBatch's
// acknowledgements in flight, and closes the connection. ctx bounds the
// wait. Publish after Close returns [transport.ErrClosed]; closing twice
// returns nil.
func (t *Transport) Close(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	t.mu.Lock()
	streams := make([]*stream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	var errs []error
	for _, s := range streams {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// Flush reads the count of messages sent under the lock sends hold:
	// a send it does not count saw t.closed and sent nothing.
	if err := t.Flush(ctx); err != nil {
		errs = append(errs, t.errf("close: PubAcks of asynchronous publishes still pending: %w", ctx.Err()))
	}
	if err := t.nc.FlushTimeout(min(t.cfg.timeout, untilDeadline(ctx))); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		errs = append(errs, t.errf("close: flush: %w", err))
	}
	t.nc.Close()
	return errors.Join(errs...)
}

// untilDeadline is how long ctx has left, or an hour without a deadline.
func untilDeadline(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return time.Hour
}

// check returns why the transport cannot be used, or nil.
func (t *Transport) check() error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return nil
}

// errf is the error of a call to the server: "jetstream: <host:port>: "
// and format, so that it says what was attempted against which server
// (the address only: never a credential).
func (t *Transport) errf(format string, args ...any) error {
	return fmt.Errorf("jetstream: %s: "+format, append([]any{t.cfg.addr}, args...)...)
}

// opCtx bounds one server call by the transport's timeout.
func (t *Transport) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.cfg.timeout)
}

// streamConfig is the configuration of a stream the transport creates for
// topic.
func (t *Transport) streamConfig(name, topic string) njs.StreamConfig {
	subjects := []string{topic}
	if !hasWildcard(topic) {
		subjects = append(subjects, topic+".>")
	}
	sc := njs.StreamConfig{
		Name:       name,
		Subjects:   subjects,
		Retention:  njs.LimitsPolicy,
		Storage:    njs.FileStorage,
		Replicas:   t.cfg.replicas,
		MaxAge:     t.cfg.maxAge,
		Duplicates: t.cfg.duplicates,
	}
	if t.cfg.storage == MemoryStorage {
		sc.Storage = njs.MemoryStorage
	}
	return sc
}

// streamFor returns the stream that captures subject (a topic, or a
// consumer's filter), creating it where allowed: the [Stream] option's, or
// the stream whose subjects capture it, or a new one named after it.
func (t *Transport) streamFor(ctx context.Context, subject string) (njs.Stream, error) {
	ctx, cancel := t.opCtx(ctx)
	defer cancel()
	if name := t.cfg.stream; name != "" {
		s, err := t.js.Stream(ctx, name)
		if errors.Is(err, njs.ErrStreamNotFound) && t.cfg.create {
			s, err = t.js.CreateStream(ctx, t.streamConfig(name, subject))
			if errors.Is(err, njs.ErrStreamNameAlreadyInUse) {
				s, err = t.js.Stream(ctx, name)
			}
		}
		if err != nil {
			return nil, t.streamError(name, subject, err)
		}
		for _, p := range s.CachedInfo().Config.Subjects {
			if subjectMatches(p, subject) {
				return s, nil
			}
		}
		return nil, fmt.Errorf("jetstream: stream %s does not capture %q (its subjects: %s); Ferry never changes a stream's subjects: add it, or use another stream: %w",
			name, subject, strings.Join(s.CachedInfo().Config.Subjects, ", "), transport.ErrNotFound)
	}
	for attempt := 0; ; attempt++ {
		name, err := t.js.StreamNameBySubject(ctx, subject)
		if err == nil {
			s, err := t.js.Stream(ctx, name)
			if err != nil {
				return nil, t.streamError(name, subject, err)
			}
			return s, nil
		}
		if !errors.Is(err, njs.ErrStreamNotFound) {
			return nil, fmt.Errorf("jetstream: looking up the stream of %q: %w", subject, err)
		}
		if !t.cfg.create {
			return nil, fmt.Errorf("jetstream: no stream captures %q and create=false: %w", subject, transport.ErrNotFound)
		}
		name = streamNameFor(subject)
		s, err := t.js.CreateStream(ctx, t.streamConfig(name, subject))
		if err == nil {
			return s, nil
		}
		if attempt == 0 {
			continue // made meanwhile by another client, or its name is taken: look again
		}
		return nil, fmt.Errorf("jetstream: creating stream %s for %q (a stream of that name exists with other subjects? name one with the stream option): %w",
			name, subject, err)
	}
}

// streamError wraps err from looking up or creating stream name.
func (t *Transport) streamError(name, subject string, err error) error {
	if errors.Is(err, njs.ErrStreamNotFound) {
		return fmt.Errorf("jetstream: stream %s (for %q) does not exist and create=false: %w", name, subject, transport.ErrNotFound)
	}
	return fmt.Errorf("jetstream: stream %s (for %q): %w", name, subject, err)
}

// DLQName returns the DLQ subject of sub's group: its dead_letter option
// if set, else the rule of [transport.DLQName] ("<group>.dlq", or
// "ferry.dlq" for a Subscription without a Group).
func (t *Transport) DLQName(sub transport.Subscription) string {
	cc, err := t.subscriptionConfig(sub)
	if err == nil && cc.deadLetter != "" {
		return cc.deadLetter
	}
	if sub.Group == "" {
		sub.Group = DefaultGroup
	}
	return transport.DLQName(nil, sub)
}
