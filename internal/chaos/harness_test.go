package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/store/pgstore"
)

// proc is one consumer process.
type proc struct {
	n     int
	cmd   *exec.Cmd
	stdin *os.File // closing it ends the process (see consumerMain)
	ready chan struct{}
	done  chan struct{}
	log   string
}

// startConsumer starts consumer process n with cfg, its stderr in a file
// of logDir; it does not wait until it is ready.
func startConsumer(t *testing.T, cfg consumerConfig, n int, logDir string) *proc {
	t.Helper()
	spec, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{n: n, ready: make(chan struct{}), done: make(chan struct{}),
		log: filepath.Join(logDir, fmt.Sprintf("consumer-%d.log", n))}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = w
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=consumer", configEnv+"="+string(spec))
	cmd.Stdin = r
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	p.cmd = cmd
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(p.ready)
			}
		}
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p
}

// waitReady waits until p's subscription is open.
func (p *proc) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("consumer %d exited before it was ready: %s", p.n, p.tail())
	case <-time.After(within):
		t.Fatalf("consumer %d not ready within %v: %s", p.n, within, p.tail())
	}
}

// kill ends p with SIGKILL and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	_ = p.stdin.Close()
}

// stop ends p with SIGTERM (the Router drains) and waits, at most 30s
// before it kills it. It reports whether p exited by itself.
func (p *proc) stop() bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		_ = p.stdin.Close()
		return true
	case <-time.After(30 * time.Second):
		p.kill()
		return false
	}
}

// tail is the end of p's log.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// action is one fault, taken when the applied effects reach at (a
// fraction of the events).
type action struct {
	at   float64
	kind string // "kill", "broker", "join", "leave"
}

// scenario is one chaos run on one broker.
type scenario struct {
	name      string
	keys      int // events = keys * perKey
	perKey    int
	consumers int // processes at the start
	actions   []action
	dedupe    bool          // false: the stack without Deduplicate
	ordered   bool          // false: ferry.Unordered
	rate      int           // events published per second; 0: as fast as the broker confirms
	drain     time.Duration // how long the effects may take after the last publish
	settle    time.Duration // how long to wait after the last effect, for late duplicates
}

// result is what a run counts.
type result struct {
	Broker          string  `json:"broker"`
	Scenario        string  `json:"scenario"`
	Events          int     `json:"events"`
	Published       int     `json:"published"` // publish calls that succeeded, producer duplicates included
	Kills           int     `json:"kills"`
	BrokerRestarts  int     `json:"broker_restarts"`
	Joins           int     `json:"joins"`
	Leaves          int     `json:"leaves"`
	MaxConsumers    int     `json:"max_consumers"`
	Lost            int     `json:"lost"`
	Duplicates      int     `json:"duplicates"`
	OrderViolations int     `json:"order_violations"`
	Parked          int     `json:"parked"`
	MaxGapSeconds   float64 `json:"max_gap_s"` // longest pause between two first effects
	DrainSeconds    float64 `json:"drain_s"`   // last publish to last first effect
	TotalSeconds    float64 `json:"total_s"`   // first publish to last first effect
	Loaded          string  `json:"load"`      // the machine's load average at the end

	lastEffect time.Time
}

func (r result) String() string {
	return fmt.Sprintf("%s/%s: %d events, %d kills, %d broker restarts, %d joins, %d leaves: lost %d, duplicates %d, order violations %d, parked %d, longest pause %.1fs, drain %.1fs (total %.1fs, load %s)",
		r.Broker, r.Scenario, r.Events, r.Kills, r.BrokerRestarts, r.Joins, r.Leaves,
		r.Lost, r.Duplicates, r.OrderViolations, r.Parked, r.MaxGapSeconds, r.DrainSeconds, r.TotalSeconds, r.Loaded)
}

// runScenario runs sc on b: consumers, a publisher of keyed events, the
// faults at their points, then the count.
func runScenario(t *testing.T, b *broker, sc scenario) result {
	t.Helper()
	pool := testenv.Postgres(t, 4)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	// The consumers' inbox and lot: migrated here, not left to whichever
	// other test of the run happened to create them first.
	if err := pgstore.MigrateIdempotency(ctx, pool, pgstore.DefaultIdempotencyTable); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.MigrateParking(ctx, pool, pgstore.DefaultParkingPrefix); err != nil {
		t.Fatal(err)
	}
	run := uniqueRun()
	topic := b.topic("chaos-" + run)
	group := "g-" + run
	cfg := consumerConfig{
		URL: b.url, Topic: topic, Group: group, Sub: "chaos-" + run, Run: run,
		Postgres: testenv.PostgresURL(), Options: b.subOptions, Concurrency: 8,
		Dedupe: sc.dedupe, Ordered: sc.ordered,
	}
	t.Cleanup(func() { cleanupPostgres(pool, cfg) })
	if b.cleanup != nil {
		t.Cleanup(func() { b.cleanup(t, topic, group) })
	}

	logDir := t.TempDir() // before the cleanup below, which reads the logs, so removed after it
	if d := os.Getenv("FERRY_CHAOS_LOGDIR"); d != "" {
		logDir = d // kept, to read every consumer's whole log afterwards
	}
	var (
		mu      sync.Mutex
		procs   []*proc
		started int
	)
	spawn := func() *proc {
		mu.Lock()
		started++
		n := started
		mu.Unlock()
		p := startConsumer(t, cfg, n, logDir)
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
		return p
	}
	alive := func() []*proc {
		mu.Lock()
		defer mu.Unlock()
		var out []*proc
		for _, p := range procs {
			select {
			case <-p.done:
			default:
				out = append(out, p)
			}
		}
		return out
	}
	t.Cleanup(func() {
		for _, p := range alive() {
			p.kill()
		}
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range procs {
				if tail := strings.TrimSpace(p.tail()); tail != "" {
					t.Logf("consumer %d log (end):\n%s", p.n, tail)
				}
			}
		}
	})
	for range sc.consumers {
		spawn()
	}
	for _, p := range alive() {
		p.waitReady(t, 2*time.Minute)
	}

	res := result{Broker: b.name, Scenario: sc.name, Events: sc.keys * sc.perKey, MaxConsumers: sc.consumers}
	pub := b.publisher(t)
	var published atomic.Int64
	pubDone := make(chan error, 1)
	var pubEnd atomic.Int64
	start := time.Now()
	go func() {
		err := publish(pub, topic, run, sc.keys, sc.perKey, sc.rate, &published)
		pubEnd.Store(time.Now().UnixNano())
		pubDone <- err
	}()

	// The faults, each when the applied effects reach its point.
	applied := func() int {
		var k int
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := pool.QueryRow(qctx, `SELECT count(DISTINCT id) FROM ferry_chaos_effects WHERE run = $1`, run).Scan(&k); err != nil {
			t.Logf("count: %v", err)
			return -1
		}
		return k
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 17))
	acts := append([]action(nil), sc.actions...)
	sort.Slice(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
	deadline := time.Now().Add(sc.drain + 10*time.Minute)
	var pubErr error
	pubFinished := false
	lastLog := time.Now()
	for len(acts) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("faults not all taken: %d left; applied %d of %d", len(acts), applied(), res.Events)
		}
		select {
		case pubErr = <-pubDone:
			pubFinished = true
			if pubErr != nil {
				t.Fatalf("publish: %v", pubErr)
			}
		case <-time.After(100 * time.Millisecond):
		}
		if k := applied(); k < int(acts[0].at*float64(res.Events)) {
			if time.Since(lastLog) > 10*time.Second {
				t.Logf("%d of %d applied after %v", k, res.Events, time.Since(start).Round(time.Second))
				lastLog = time.Now()
			}
			continue
		}
		a := acts[0]
		acts = acts[1:]
		switch a.kind {
		case "kill":
			ps := alive()
			if len(ps) == 0 {
				t.Fatal("no consumer left to kill")
			}
			victim := ps[rng.IntN(len(ps))]
			t.Logf("killing consumer pid %d at %s", victim.cmd.Process.Pid, time.Now().Format(time.RFC3339Nano))
			victim.kill()
			res.Kills++
			// A process manager restarts it after a moment.
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			spawn().waitReady(t, 2*time.Minute)
		case "broker":
			if b.restart == nil {
				t.Fatalf("%s: no broker restart", b.name)
			}
			b.restart(t)
			res.BrokerRestarts++
		case "join":
			spawn().waitReady(t, 2*time.Minute)
			res.Joins++
			res.MaxConsumers = max(res.MaxConsumers, len(alive()))
		case "leave":
			ps := alive()
			if len(ps) < 2 {
				t.Fatal("a member leaves only while another stays")
			}
			if !ps[rng.IntN(len(ps))].stop() {
				t.Errorf("a leaving consumer did not drain within 30s")
			}
			res.Leaves++
		}
		t.Logf("%s at %d applied (%d published) after %v", a.kind, applied(), published.Load(), time.Since(start).Round(time.Millisecond))
	}
	if !pubFinished {
		if pubErr = <-pubDone; pubErr != nil {
			t.Fatalf("publish: %v", pubErr)
		}
	}
	res.Published = int(published.Load())

	// Drain: wait for every event's effect.
	drainEnd := time.Now().Add(sc.drain)
	var last int
	lastLog = time.Now()
	for {
		last = applied()
		if last >= res.Events || time.Now().After(drainEnd) {
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			t.Logf("draining: %d of %d applied after %v", last, res.Events, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A moment more, for late redeliveries to show as duplicates.
	time.Sleep(sc.settle)
	var stopping sync.WaitGroup
	for _, p := range alive() {
		stopping.Go(func() { p.stop() })
	}
	stopping.Wait()
	tallyEffects(t, pool, run, sc, &res)
	res.TotalSeconds = res.lastEffect.Sub(start).Seconds()
	res.DrainSeconds = max(0, res.lastEffect.Sub(time.Unix(0, pubEnd.Load())).Seconds())
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.Loaded = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	if res.DrainSeconds > 30 && !t.Failed() {
		// Slow, not wrong: say where the time went.
		mu.Lock()
		for _, p := range procs {
			if tail := strings.TrimSpace(p.tail()); tail != "" {
				t.Logf("consumer %d log (end):\n%s", p.n, tail)
			}
		}
		mu.Unlock()
	}
	record(t, res)
	return res
}
