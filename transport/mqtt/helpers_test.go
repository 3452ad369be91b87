package mqtt_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/mosquitto"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// brokerAddr is the shared Mosquitto, FERRY_MQTT_ADDR or 127.0.0.1:1883.
func brokerAddr() string {
	if a := os.Getenv("FERRY_MQTT_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}

// sessionReaper removes, when the test that made it ends, every persistent
// session the transports it opened used, so that tests leave no sessions
// behind on the shared broker.
type sessionReaper struct {
	addr string
	mu   sync.Mutex
	ids  map[string]bool
}

func newReaper(t testing.TB, addr string) *sessionReaper {
	r := &sessionReaper{addr: addr, ids: make(map[string]bool)}
	t.Cleanup(func() {
		r.mu.Lock()
		ids := r.ids
		r.ids = map[string]bool{}
		r.mu.Unlock()
		if len(ids) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tr, err := mqtt.New(ctx, "mqtt://"+r.addr)
		if err != nil {
			t.Logf("cannot remove %d test sessions: %v", len(ids), err)
			return
		}
		defer tr.Close(ctx)
		for id := range ids {
			if err := tr.RemoveSession(ctx, id); err != nil {
				t.Logf("remove session %s: %v", id, err)
			}
		}
	})
	return r
}

func (r *sessionReaper) add(ids ...string) {
	r.mu.Lock()
	for _, id := range ids {
		r.ids[id] = true
	}
	r.mu.Unlock()
}

// open connects a Transport to addr that closes, and has its sessions
// reaped, when t ends.
func (r *sessionReaper) open(t testing.TB, opts ...mqtt.Option) *mqtt.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := mqtt.New(ctx, "mqtt://"+r.addr, opts...)
	if err != nil {
		t.Fatalf("mqtt.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Transport.Close: %v", err)
		}
		r.add(tr.Sessions()...)
	})
	return tr
}

// shared returns a reaper for the shared broker, skipping t when it is
// unreachable (failing under FERRY_REQUIRE_BROKERS=1).
func shared(t testing.TB) *sessionReaper {
	t.Helper()
	transporttest.RequireBroker(t, "mosquitto", brokerAddr())
	return newReaper(t, brokerAddr())
}

// requireBinary skips t when a program is not installed, or fails it under
// FERRY_REQUIRE_BROKERS=1.
func requireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
		t.Fatalf("%s not installed (%s=1): apt-get install mosquitto mosquitto-clients", name, transporttest.RequireBrokersEnv)
	}
	t.Skipf("%s not installed: apt-get install mosquitto mosquitto-clients; set %s=1 to fail instead", name, transporttest.RequireBrokersEnv)
	return ""
}

// privateBroker is a Mosquitto of the test's own (internal/mosquitto),
// on a free port, with persistence in a temporary directory, that the
// test may stop and start.
type privateBroker struct {
	*mosquitto.Broker
	port int
}

// startPrivateBroker starts a private Mosquitto and stops it when t ends.
// Its configuration is persistence on, max_queued_messages 0 (no limit),
// and then the lines of extra, which override those.
func startPrivateBroker(t testing.TB, extra ...string) *privateBroker {
	t.Helper()
	b := mosquitto.Start(t, extra...)
	return &privateBroker{Broker: b, port: b.Port()}
}

func (b *privateBroker) addr() string { return b.Addr() }
func (b *privateBroker) restart()     { b.Restart() }
func (b *privateBroker) stop()        { b.Stop() }
func (b *privateBroker) start()       { b.Resume() }

// log returns the broker's log.
func (b *privateBroker) log() string {
	l, _ := os.ReadFile(b.LogFile())
	return string(l)
}

// logRecorder is a slog.Handler that keeps every record, for tests that
// assert what was logged.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// count returns how many records at level or above have msg containing
// text.
func (l *logRecorder) count(level slog.Level, text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if r.Level >= level && strings.Contains(r.Message, text) {
			n++
		}
	}
	return n
}

// attr returns the value of attribute key in the last record whose
// message contains text.
func (l *logRecorder) attr(text, key string) (slog.Value, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.records) - 1; i >= 0; i-- {
		r := l.records[i]
		if !strings.Contains(r.Message, text) {
			continue
		}
		var v slog.Value
		found := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

// protocol is one MQTT version the tests run on.
type protocol struct {
	name string // the subtest name: "mqtt5" or "mqtt311"
	v    mqtt.Version
}

// protocols are both versions this transport speaks.
var protocols = []protocol{{"mqtt5", mqtt.MQTT5}, {"mqtt311", mqtt.MQTT311}}

// opt is the Option that selects p.
func (p protocol) opt() mqtt.Option { return mqtt.Protocol(p.v) }

// eachProtocol runs f as a subtest per protocol version.
func eachProtocol(t *testing.T, f func(t *testing.T, p protocol)) {
	t.Helper()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) { f(t, p) })
	}
}
