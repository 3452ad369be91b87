package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/store/redisstore"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// redisAddr is the machine's shared Redis: never flush or restart it.
const redisAddr = "127.0.0.1:6379"

// scriptPayload is a dead letter's payload that would run if the page put
// it in as HTML.
const scriptPayload = `<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">{"sku":"X-1"}`

// chromium returns the system Chromium, skipping (or failing under
// FERRY_REQUIRE_BROKERS=1) when it is not installed.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
		t.Fatalf("chromium is not installed (apt-get install chromium; %s=1)", transporttest.RequireBrokersEnv)
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// scenario is a Router on the shared Redis whose inventory handler fails
// on purpose until fixed: a keyless message is dead-lettered, a keyed one
// parks its key with a second message behind it.
type scenario struct {
	tr      *redisstream.Transport
	lot     *redisstore.Lot
	sub     string
	topic   string
	group   string
	h       handler.Handler
	fixed   atomic.Bool
	mu      sync.Mutex
	applied []string
	changed chan struct{}
}

func (s *scenario) appliedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.applied...)
}

// waitApplied waits until the handler has applied exactly want, in order.
func (s *scenario) waitApplied(t *testing.T, want ...string) {
	t.Helper()
	s.waitAppliedThen(t, want, nil)
}

// waitAppliedThen waits until the handler has applied exactly first, in
// order, and then the messages of then, in any order.
func (s *scenario) waitAppliedThen(t *testing.T, first, then []string) {
	t.Helper()
	want := append(append([]string(nil), first...), then...)
	deadline := time.After(15 * time.Second)
	for {
		got := s.appliedIDs()
		if len(got) == len(want) {
			tail := append([]string(nil), got[len(first):]...)
			sort.Strings(tail)
			sorted := append([]string(nil), then...)
			sort.Strings(sorted)
			if strings.Join(got[:len(first)], ",") == strings.Join(first, ",") && strings.Join(tail, ",") == strings.Join(sorted, ",") {
				return
			}
		}
		if len(got) > len(want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("applied %v, want %v", got, want)
		}
	}
}

func startScenario(t *testing.T) *scenario {
	t.Helper()
	transporttest.RequireBroker(t, "redis", redisAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := suffix()
	s := &scenario{
		sub:     "inventory-" + id,
		topic:   "console-orders-" + id,
		group:   "inventory-" + id,
		changed: make(chan struct{}, 64),
	}
	tr, err := redisstream.New(ctx, "redis://"+redisAddr+"?block=200ms&claim_idle=2s&claim_interval=200ms")
	if err != nil {
		t.Fatal(err)
	}
	s.tr = tr
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	prefix := "ferry-console-test:" + id
	lot, err := redisstore.NewLot(c, redisstore.Prefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s.lot = lot
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
		for _, pattern := range []string{s.topic + "*", s.group + "*", prefix + "*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
		_ = c.Close()
	})
	inventory := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if strings.HasPrefix(m.ID, "flow-") {
			return nil // the steady traffic the charts show
		}
		if !s.fixed.Load() {
			return handler.Permanentf("unknown SKU in %s", m.ID)
		}
		s.mu.Lock()
		s.applied = append(s.applied, m.ID)
		s.mu.Unlock()
		select {
		case s.changed <- struct{}{}:
		default:
		}
		return nil
	})
	mw, err := middleware.Recommended(tr, middleware.Parking(lot, middleware.CopyToDLQ(nil), middleware.ReleaseRequests(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	s.h = mw(inventory)
	r, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(s.sub, tr, transport.Subscription{Topic: s.topic, Group: s.group}, s.h); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		<-done
	})
	select {
	case <-r.Ready():
	case <-ctx.Done():
		t.Fatal("router not ready")
	}
	for _, m := range []*handler.Message{
		{ID: "poison-1", Topic: s.topic, Payload: []byte(scriptPayload), Headers: map[string]string{"x-note": `<b onmouseover="x">bold?</b>`}},
		{ID: "poison-2", Topic: s.topic, Payload: []byte(`{"sku":"X-2"}`)},
		{ID: "poison-3", Topic: s.topic, Payload: []byte{0xff, 0x00, 0x01}},
		{ID: "order-7-placed", Key: "order-7", Topic: s.topic, Payload: []byte(`{"order":7,"event":"placed"}`)},
		{ID: "order-7-paid", Key: "order-7", Topic: s.topic, Payload: []byte(`{"order":7,"event":"paid"}`)},
		{ID: "order-9-placed", Key: "order-9", Topic: s.topic, Payload: []byte(`{"order":9,"event":"placed"}`)},
	} {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Steady traffic of other keys, for the throughput chart: it keeps
	// flowing while order-7 is parked.
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(rctx, 5*time.Second)
			_ = tr.Publish(pctx, &handler.Message{ID: fmt.Sprintf("flow-%d", i), Key: fmt.Sprintf("order-%d", 100+i%20), Topic: s.topic, Payload: []byte(`{}`)})
			cancel()
		}
	}()
	// Wait for one dead letter and the parked key with two messages.
	for {
		keys, _ := lot.Keys(ctx, s.sub)
		dl, _ := tr.ListDLQ(ctx, tr.DLQName(transport.Subscription{Topic: s.topic, Group: s.group}), 10)
		counts := map[string]int{}
		for _, k := range keys {
			counts[k.Key] = k.Count
		}
		if len(keys) == 2 && counts["order-7"] == 2 && counts["order-9"] == 1 && len(dl) == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no dead letter and parked key: keys %+v, dead letters %d", keys, len(dl))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return s
}

// serve runs a console Server on a loopback port until the test ends and
// returns its base URL.
func serve(t *testing.T, cfg console.Config) string {
	t.Helper()
	srv, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String() + "/"
}

// TestBrowser drives the page in headless Chromium against a Router on
// Redis: the dead letter's <script> payload is shown as text, Replay
// applies it, Release applies the parked key's messages in order.
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	s := startScenario(t)
	ops, err := console.NewOperations(s.tr, s.lot, []transport.Subscription{{Topic: s.topic, Group: s.group}})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, console.Config{
		Listen: "127.0.0.1:0", URL: "redis://" + redisAddr,
		Monitor: ops, DeadLetters: ops, Lot: ops, Interval: 300 * time.Millisecond,
	})

	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-dev-shm-usage", true))
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel := context.WithTimeout(bctx, 45*time.Second)
	defer cancel()

	row := `#dlq tbody tr[data-id="poison-1"]`
	parked := `#parked tbody tr[data-key="order-7"]`
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	do(
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS(row+` a.show`)),
		chromedp.Click(chromedp.CSS(row+` a.show`)),
		chromedp.WaitVisible(chromedp.CSS(`#detail-payload`)),
		chromedp.WaitVisible(chromedp.CSS(parked)),
		chromedp.WaitVisible(chromedp.CSS(`#groups tbody tr td svg polyline`)),
	)
	if got := text(`#detail-payload`); got != scriptPayload {
		t.Errorf("payload shown as %q, want the text %q", got, scriptPayload)
	}
	if got := text(`#detail-headers tbody`); !strings.Contains(got, `<b onmouseover="x">bold?</b>`) {
		t.Errorf("headers shown as %q, want the x-note header as text", got)
	}
	if got := eval(`String(window.__pwned) + "," + document.querySelectorAll("script").length + "," + document.querySelectorAll("main img, main b").length`); got != "undefined,1,0" {
		t.Errorf("the payload ran or became elements: pwned,scripts,elements = %s", got)
	}
	if got := text(`#measures dd.measure-throughput`); got != "Throughput: entries the group read and acked (XINFO GROUPS entries-read minus pending)" {
		t.Errorf("throughput measure shown as %q", got)
	}
	if got := text(`#inbox-empty`); got != "No inbox: start the console with --inbox." {
		t.Errorf("inbox section without --inbox: %q", got)
	}
	if got := text(parked + ` td.count`); got != "2" {
		t.Errorf("parked count %q, want 2", got)
	}
	if got := text(`#parked-summary li`); !strings.HasPrefix(got, s.sub+": 2 keys parked (3 messages), the oldest for ") {
		t.Errorf("parked summary %q", got)
	}
	do(
		chromedp.Click(chromedp.CSS(parked+` button.messages`)),
		chromedp.WaitVisible(chromedp.CSS(`#parked-messages tbody tr[data-id="order-7-paid"]`)),
	)
	if got := eval(`[...document.querySelectorAll("#parked-messages tbody tr")].map(r => r.getAttribute("data-id")).join(",")`); got != "order-7-placed,order-7-paid" {
		t.Errorf("parked messages shown %q, want order-7-placed,order-7-paid", got)
	}
	if path := os.Getenv("FERRY_CONSOLE_SCREENSHOT"); path != "" {
		time.Sleep(4 * time.Second) // a few points on the charts
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Drop order-9 with a reason: the audit record shows it.
	dropped := `#parked tbody tr[data-key="order-9"]`
	do(
		chromedp.Click(chromedp.CSS(dropped+` button.drop`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-reason`)),
		chromedp.SendKeys(chromedp.CSS(`#confirm-reason`), "order 9 was cancelled upstream"),
		chromedp.SendKeys(chromedp.CSS(`#confirm-by`), "ana"),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(dropped)),
		chromedp.WaitVisible(chromedp.CSS(`#audits tbody tr`)),
	)
	if got := text(`#audits tbody tr`); !strings.Contains(got, "order-9-placed") || !strings.Contains(got, "ana (ferry console)") ||
		!strings.Contains(got, "order 9 was cancelled upstream") {
		t.Errorf("audit row %q", got)
	}
	if a, err := s.lot.Audits(context.Background(), s.sub); err != nil || len(a) != 1 || a[0].Audit.By != "ana (ferry console)" ||
		strings.Join(a[0].IDs, ",") != "order-9-placed" {
		t.Errorf("audits %+v, %v", a, err)
	}

	// Beyond loopback, the same click without the operator token is
	// refused, and the key stays parked.
	guarded := "http://" + run(t, console.Config{
		Listen: "0.0.0.0:0", Token: "op-token-77", URL: "redis://" + redisAddr,
		Monitor: ops, DeadLetters: ops, Lot: ops, Interval: 300 * time.Millisecond,
	}) + "/"
	do(
		chromedp.Navigate(guarded),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.Click(chromedp.CSS(parked+` button.release`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitVisible(chromedp.CSS(`#parked-result.error`)),
	)
	if got := text(`#parked-result`); !strings.Contains(got, "needs the operator token") {
		t.Errorf("release without the token beyond loopback: %q", got)
	}
	if keys, err := s.lot.Keys(context.Background(), s.sub); err != nil || len(keys) != 1 || keys[0].Count != 2 {
		t.Fatalf("parked keys after a refused release: %+v, %v", keys, err)
	}

	s.fixed.Store(true)
	do(
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS(row+` button.replay`)),
		chromedp.Click(chromedp.CSS(row+` button.replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
	)
	if got := text(`#dlq-result`); got != "Replayed 1 message." {
		t.Errorf("replay result %q", got)
	}
	s.waitApplied(t, "poison-1")

	do(
		chromedp.Click(chromedp.CSS(parked+` button.release`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(parked)),
	)
	if got := text(`#parked-result`); !strings.HasPrefix(got, "Release of order-7 requested by operator (ferry console): ") {
		t.Errorf("release result %q", got)
	}
	s.waitApplied(t, "poison-1", "order-7-placed", "order-7-paid")
	if keys, err := s.lot.Keys(context.Background(), s.sub); err != nil || len(keys) != 0 {
		t.Errorf("parked keys after release: %+v, %v", keys, err)
	}

	// Tick one of the two dead letters left and replay the selection: the
	// handler applies that one alone.
	left := `#dlq tbody tr[data-id="poison-3"]`
	do(
		chromedp.Click(chromedp.CSS(`#dlq tbody tr[data-id="poison-2"] input[type=checkbox]`)),
		chromedp.WaitVisible(chromedp.CSS(`#dlq-replay-selected:enabled`)),
		chromedp.Click(chromedp.CSS(`#dlq-replay-selected`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#dlq tbody tr[data-id="poison-2"]`)),
	)
	if got := text(`#dlq-result`); got != "Replayed 1 message." {
		t.Errorf("replay of the selection: %q", got)
	}
	s.waitApplied(t, "poison-1", "order-7-placed", "order-7-paid", "poison-2")

	// Replay by the time of the first failure: from 1ms after poison-3's,
	// nothing; from poison-3's, poison-3.
	first, err := time.Parse(time.RFC3339Nano, text(left+` td.first-failure`))
	if err != nil {
		t.Fatalf("first failure shown: %v", err)
	}
	replayFrom := func(since time.Time, listed string) string {
		t.Helper()
		do(
			chromedp.SetValue(chromedp.CSS(`#dlq-since`), since.UTC().Format("2006-01-02T15:04:05.000Z")),
			chromedp.Click(chromedp.CSS(`#dlq-replay-range`)),
			chromedp.WaitVisible(chromedp.CSS(`#confirm-ok`)),
		)
		if got := text(`#confirm-text`); !strings.Contains(got, "("+listed+" of those listed)") {
			t.Errorf("confirmation %q, want %s of those listed", got, listed)
		}
		eval(`document.getElementById("dlq-result").textContent = ""`)
		do(chromedp.Click(chromedp.CSS(`#confirm-ok`)), chromedp.WaitNotVisible(chromedp.CSS(`#confirm-ok`)))
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`/^(Replayed|replay refused)/.test(document.getElementById("dlq-result").textContent)`)); err != nil {
			t.Fatalf("no replay result: %v (%q)", err, text(`#dlq-result`))
		}
		return text(`#dlq-result`)
	}
	if got := replayFrom(first.Add(time.Millisecond), "0"); got != "Replayed 0 messages." {
		t.Errorf("replay of a range after every first failure: %q", got)
	}
	do(chromedp.WaitVisible(chromedp.CSS(left)))
	if got := replayFrom(first, "1"); got != "Replayed 1 message." {
		t.Errorf("replay of the range from poison-3's first failure: %q", got)
	}
	do(chromedp.WaitNotPresent(chromedp.CSS(left)))
	s.waitApplied(t, "poison-1", "order-7-placed", "order-7-paid", "poison-2", "poison-3")
}
