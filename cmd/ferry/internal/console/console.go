package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// ErrInvalidConfig is returned (wrapped) by [New] for a Config it cannot
// serve: no Monitor, a bad listen address, an interval out of range.
var ErrInvalidConfig = errors.New("console: invalid configuration")

// Group is one subscription the console watches: its name (the Router's
// subscription name, which is also the parking lot's subscription), the
// transport subscription (topic and group) and its DLQ.
type Group struct {
	Name string
	Sub  transport.Subscription
	DLQ  string // the DLQ of the group ([transport.DLQName])
	// Measure says what the broker tells of the group's progress: what
	// the lag and the throughput are, or why there is none.
	Measure ops.Measure
}

// Sample is one reading of a group's progress.
type Sample struct {
	// Lag is how far the group is behind, per partition, shard or queue.
	Lag []transport.Lag
	// Consumed is a count of the group's messages consumed so far that
	// only grows ([ops.Counter]: a Kafka committed offset sum, a JetStream
	// ack floor, Redis entries read and acked), from which the console
	// derives the throughput; -1 if the broker tells none.
	Consumed int64
}

// Monitor reads the groups of the transport in use and how they progress.
// Its methods may be called concurrently.
type Monitor interface {
	// Groups returns the groups to show.
	Groups(ctx context.Context) ([]Group, error)
	// Lag reads g's progress now.
	Lag(ctx context.Context, g Group) (Sample, error)
	// Semantics returns what the transport declares for g.
	Semantics(ctx context.Context, g Group) (ops.SemanticsRow, error)
}

// DeadLetters lists and replays the dead letters of a group. Its methods
// may be called concurrently.
type DeadLetters interface {
	// List returns up to limit dead letters of g, oldest first, without
	// settling them.
	List(ctx context.Context, g Group, limit int) ([]ops.DeadLetter, error)
	// Replay republishes the dead letters of g that s selects to their
	// original topics (see [ops.ReplayDLQ]).
	Replay(ctx context.Context, g Group, s ops.Selection) (ops.ReplayResult, error)
}

// Lot is the operators' view of the parking lot. Its methods may be called
// concurrently.
type Lot interface {
	// Parked lists the parked keys of every subscription, oldest first.
	Parked(ctx context.Context) ([]ops.ParkedKey, error)
	// Show returns a parked key and up to limit of its messages, in order.
	Show(ctx context.Context, sub, key string, limit int) (ops.ParkedDetail, error)
	// RequestRelease records in the lot that by asks the running consumers
	// of sub to release key in order ([parking.Lot.RequestRelease]), and
	// returns at once with the request's progress; the key's ParkedKey
	// shows the request, and the key leaves Parked when it is done.
	RequestRelease(ctx context.Context, sub, key, by string) (ops.ReleaseProgress, error)
	// Drop discards key's parked messages and keeps the audit record.
	Drop(ctx context.Context, sub, key string, a parking.Audit) (ops.DroppedKey, error)
	// Audits returns the audit records of the dropped keys.
	Audits(ctx context.Context) ([]ops.DroppedKey, error)
}

// Inbox reads a dedupe inbox: what it holds per namespace, its stuck
// claims, and whether a message ID was processed. Its methods may be
// called concurrently.
type Inbox interface {
	// Summary counts the records per namespace and lists the stuck claims.
	Summary(ctx context.Context) (ops.InboxSummary, error)
	// Lookup returns what the inbox knows of message id in namespace.
	Lookup(ctx context.Context, namespace, id string) (ops.InboxRecord, error)
}

// Config is what [New] serves.
type Config struct {
	// Listen is the address to listen on; default 127.0.0.1:8090.
	Listen string
	// Token, when set, is the operator token a write action must carry in
	// the X-Ferry-Token header. It is required for writes when Listen is
	// not a loopback address; on loopback it is optional (and then, when
	// set, required too).
	Token string
	// URL is the broker URL as shown on the page: pass it redacted
	// ([transport.RedactString]); New redacts it again.
	URL string
	// Secrets are strings (the passwords of the broker URL and the store
	// DSNs) that never leave the server: every error text sent to the page
	// has them replaced.
	Secrets []string
	// Monitor is required; DeadLetters, Lot and Inbox may be nil (the
	// page then says which flag would enable them).
	Monitor     Monitor
	DeadLetters DeadLetters
	Lot         Lot
	Inbox       Inbox
	// Interval is how often the lag is read for the charts; default 2s,
	// between 200ms and 1m.
	Interval time.Duration
	// History is how long the charts reach back; default 10m.
	History time.Duration
	// Timeout bounds each operation; default 10s.
	Timeout time.Duration
	// Logger receives the server's log lines; default slog.Default().
	Logger *slog.Logger
}

// Server is the console's HTTP server. Create it with [New].
type Server struct {
	cfg      Config
	loopback bool
	csrf     string
	log      *slog.Logger
	mux      *http.ServeMux

	mu      sync.Mutex
	groups  []Group
	series  map[string]*ring
	lastErr string
}

// New checks cfg and returns a Server; call [Server.Run] to serve.
func New(cfg Config) (*Server, error) {
	if cfg.Monitor == nil {
		return nil, fmt.Errorf("%w: no Monitor", ErrInvalidConfig)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8090"
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen address %q: %w", ErrInvalidConfig, cfg.Listen, err)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Interval < 200*time.Millisecond || cfg.Interval > time.Minute {
		return nil, fmt.Errorf("%w: interval %v is not between 200ms and 1m", ErrInvalidConfig, cfg.Interval)
	}
	if cfg.History == 0 {
		cfg.History = 10 * time.Minute
	}
	if cfg.History < cfg.Interval {
		return nil, fmt.Errorf("%w: history %v is shorter than the interval", ErrInvalidConfig, cfg.History)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.URL = transport.RedactString(cfg.URL)
	var secrets []string
	for _, s := range cfg.Secrets {
		if len(s) >= 3 { // shorter ones would mangle every text
			secrets = append(secrets, s)
		}
	}
	cfg.Secrets = secrets
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("console: csrf token: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		loopback: isLoopbackHost(host),
		csrf:     hex.EncodeToString(b),
		log:      cfg.Logger,
		series:   map[string]*ring{},
	}
	s.routes()
	return s, nil
}

// Handler returns the console's HTTP handler (for tests and for serving on
// a listener of the caller's).
func (s *Server) Handler() http.Handler { return s.guard(s.mux) }

// Writable reports whether write actions are possible: on loopback always,
// elsewhere only with a token.
func (s *Server) Writable() bool { return s.loopback || s.cfg.Token != "" }

// Run samples the groups and serves on Config.Listen until ctx ends, then
// shuts the server down. ready, if not nil, is called with the address
// listened on once the listener is open.
func (s *Server) Run(ctx context.Context, ready func(addr net.Addr)) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("console: listen: %w", err)
	}
	return s.Serve(ctx, ln, ready)
}

// Serve is Run on a listener of the caller's. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener, ready func(addr net.Addr)) error {
	if !s.loopback && s.cfg.Token == "" {
		s.log.Warn("console: listening beyond loopback without a token: read-only", "addr", ln.Addr().String())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sample(ctx)
	}()
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr())
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(sctx)
		scancel()
		<-errc
	}
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// clean returns err's text with every secret replaced.
func (s *Server) clean(err error) string {
	if err == nil {
		return ""
	}
	t := err.Error()
	for _, sec := range s.cfg.Secrets {
		t = strings.ReplaceAll(t, sec, "xxxxx")
	}
	return t
}

// isLoopbackHost reports whether host (an IP or a name) is loopback; an
// empty host (all interfaces) is not.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
