package forward_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/forward"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// upstream is a Publisher that records what it is given, in order, and
// fails while it is down: any Publisher stands in front of a broker the
// same way.
type upstream struct {
	mu      sync.Mutex
	got     []*handler.Message
	down    bool
	refuse  map[string]error // ID -> the error Publish returns for it, for ever
	calls   int
	blocked chan struct{} // if set, Publish waits for it to close
}

var errDown = errors.New("upstream: not connected")

func (u *upstream) Publish(ctx context.Context, m *handler.Message) error {
	if u.blocked != nil {
		<-u.blocked
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	if err := u.refuse[m.ID]; err != nil {
		return err
	}
	if u.down {
		return errDown
	}
	u.got = append(u.got, m.Clone())
	return nil
}

func (u *upstream) Close(context.Context) error { return nil }

func (u *upstream) setDown(down bool) {
	u.mu.Lock()
	u.down = down
	u.mu.Unlock()
}

func (u *upstream) ids() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, m := range u.got {
		out = append(out, m.ID)
	}
	return out
}

func open(t *testing.T, path string, up transport.Publisher, opts ...forward.Option) *forward.Buffer {
	t.Helper()
	b, err := forward.New(path, up, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func msg(i int) *handler.Message {
	return &handler.Message{ID: fmt.Sprint("r-", i), Key: fmt.Sprint("dev-", i%3), Topic: "readings", Payload: []byte(strconv.Itoa(i)),
		Headers: map[string]string{"seq": strconv.Itoa(i)}}
}

func flush(t *testing.T, b *forward.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v (%+v)", err, b.Stats())
	}
}

func wantInOrder(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("the upstream got %d messages, want %d: %v", len(got), n, got)
	}
	for i, id := range got {
		if id != fmt.Sprint("r-", i) {
			t.Fatalf("the upstream got %v: not in order, or not each once", got)
		}
	}
}

// TestForwardsInOrderAcrossAnOutage: messages published while the
// upstream is down are kept, then forwarded in order, each once, with
// every field as given, when it comes back.
func TestForwardsInOrderAcrossAnOutage(t *testing.T) {
	up := &upstream{down: true}
	b := open(t, filepath.Join(t.TempDir(), "b.db"), up, forward.MaxBackoff(100*time.Millisecond))
	for i := range 300 {
		if err := b.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if s := b.Stats(); s.Pending != 300 || s.Forwarded != 0 {
		t.Fatalf("while down: %+v; want 300 pending", s)
	}
	up.setDown(false)
	flush(t, b)
	wantInOrder(t, up.ids(), 300)
	up.mu.Lock()
	m := up.got[7]
	up.mu.Unlock()
	if want := msg(7); m.Key != want.Key || m.Topic != want.Topic || string(m.Payload) != string(want.Payload) || !maps.Equal(m.Headers, want.Headers) {
		t.Errorf("forwarded %+v; want %+v", m, want)
	}
	if s := b.Stats(); s.Pending != 0 || s.Forwarded != 300 || s.Bytes != 0 {
		t.Errorf("after: %+v", s)
	}
}

// TestReopenCarriesOn: a Buffer closed with messages pending forwards
// them, in order, once opened again on the same file.
func TestReopenCarriesOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	up := &upstream{down: true}
	b, err := forward.New(path, up)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := b.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(context.Background(), msg(50)); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v; want ErrClosed", err)
	}
	up.setDown(false)
	flush(t, open(t, path, up))
	wantInOrder(t, up.ids(), 50)
}

// TestKill9LosesNothing: a child process publishes to a Buffer whose
// upstream is down and kills itself with SIGKILL the moment its 301st
// Publish returns, the worst moment for a Publish that returned before its
// commit; every message whose Publish returned before the kill is in the
// file, and is forwarded in order when the file is opened again.
func TestKill9LosesNothing(t *testing.T) {
	if os.Getenv("FORWARD_CHILD") != "" {
		return // the child's work is in TestMain
	}
	path := filepath.Join(t.TempDir(), "b.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9LosesNothing$")
	cmd.Env = append(os.Environ(), "FORWARD_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n, err := strconv.Atoi(sc.Text())
		if err != nil {
			continue
		}
		acked = n
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, not SIGKILL", err)
	}
	if acked != killAt {
		t.Fatalf("the child acknowledged %d publishes before dying; want %d", acked+1, killAt+1)
	}
	up := &upstream{}
	b := open(t, path, up)
	flush(t, b)
	got := up.ids()
	if len(got) < acked+1 {
		t.Fatalf("%d forwarded after the kill; the child had %d acknowledged", len(got), acked+1)
	}
	wantInOrder(t, got, len(got))
	t.Logf("killed after %d acknowledged publishes; %d were in the file", acked+1, len(got))
}

// killAt is the message after whose Publish the child of
// TestKill9LosesNothing kills itself.
const killAt = 300

// TestMain runs the child of TestKill9LosesNothing when asked to: it
// publishes to a Buffer with a failing upstream as fast as it can, prints
// the number of each message whose Publish returned, and sends itself
// SIGKILL right after message killAt's.
func TestMain(m *testing.M) {
	if path := os.Getenv("FORWARD_CHILD"); path != "" {
		b, err := forward.New(path, &upstream{down: true}, forward.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		w := bufio.NewWriter(os.Stdout)
		for i := 0; ; i++ {
			if err := b.Publish(context.Background(), msg(i)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Fprintln(w, i)
			_ = w.Flush()
			if i == killAt {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	os.Exit(m.Run())
}

// TestRejectWhenFull: under the default policy a full Buffer refuses a
// new message with ErrFull and keeps the ones it has; once they are
// forwarded it takes more.
func TestRejectWhenFull(t *testing.T) {
	up := &upstream{down: true}
	b := open(t, filepath.Join(t.TempDir(), "b.db"), up, forward.MaxMessages(10), forward.MaxBackoff(100*time.Millisecond))
	for i := range 10 {
		if err := b.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(context.Background(), msg(10)); !errors.Is(err, forward.ErrFull) {
		t.Fatalf("the 11th Publish = %v; want ErrFull", err)
	}
	up.setDown(false)
	flush(t, b)
	if err := b.Publish(context.Background(), msg(10)); err != nil {
		t.Fatalf("after the upstream took them: %v", err)
	}
	flush(t, b)
	wantInOrder(t, up.ids(), 11)
	if err := b.Publish(context.Background(), &handler.Message{ID: "big", Payload: make([]byte, 2<<20)}); err != nil {
		t.Fatalf("2 MiB under the default 1 GiB: %v", err)
	}
	small := open(t, filepath.Join(t.TempDir(), "s.db"), up, forward.MaxBytes(1024))
	if err := small.Publish(context.Background(), &handler.Message{ID: "big", Payload: make([]byte, 2048)}); !errors.Is(err, forward.ErrFull) {
		t.Errorf("a message over MaxBytes = %v; want ErrFull", err)
	}
}

// TestDropOldest: under DropOldest a full Buffer drops its oldest
// messages for new ones, and counts them, across a reopen.
func TestDropOldest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	up := &upstream{down: true}
	b, err := forward.New(path, up, forward.MaxMessages(10), forward.WhenFull(forward.DropOldest))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if err := b.Publish(context.Background(), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.Stats(); s.Pending != 10 || s.Dropped != 15 {
		t.Errorf("%+v; want 10 pending, 15 dropped", s)
	}
	_ = b.Close(context.Background())
	up.setDown(false)
	b = open(t, path, up, forward.MaxMessages(10), forward.WhenFull(forward.DropOldest))
	flush(t, b)
	got := up.ids()
	if len(got) != 10 || got[0] != "r-15" || got[9] != "r-24" {
		t.Errorf("forwarded %v; want r-15 … r-24", got)
	}
	if s := b.Stats(); s.Dropped != 15 {
		t.Errorf("after reopen: %+v; want Dropped 15 kept", s)
	}
}

// TestDedupe: a message given again with an ID the Buffer holds, or has
// forwarded within DedupeWindow, is dropped and counted; with
// DedupeWindow(0) it is forwarded again.
func TestDedupe(t *testing.T) {
	up := &upstream{}
	b := open(t, filepath.Join(t.TempDir(), "b.db"), up, forward.DedupeWindow(5))
	ctx := context.Background()
	for _, i := range []int{0, 0, 1} { // r-0 twice while held
		if err := b.Publish(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, b)
	_ = b.Publish(ctx, msg(1)) // forwarded, remembered
	flush(t, b)
	for i := 2; i < 10; i++ { // pushes r-0 and r-1 out of the window of 5
		_ = b.Publish(ctx, msg(i))
	}
	flush(t, b)
	_ = b.Publish(ctx, msg(0))
	flush(t, b)
	got := up.ids()
	if fmt.Sprint(got) != fmt.Sprint([]string{"r-0", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7", "r-8", "r-9", "r-0"}) {
		t.Errorf("forwarded %v", got)
	}
	if s := b.Stats(); s.Duplicates != 2 {
		t.Errorf("%+v; want 2 duplicates", s)
	}
	up2 := &upstream{}
	off := open(t, filepath.Join(t.TempDir(), "off.db"), up2, forward.DedupeWindow(0))
	_ = off.Publish(ctx, msg(0))
	_ = off.Publish(ctx, msg(0))
	flush(t, off)
	if n := len(up2.ids()); n != 2 {
		t.Errorf("with DedupeWindow(0), %d forwarded; want 2", n)
	}
}

// TestRejectedForGood: a message the upstream refuses as invalid is moved
// aside and counted; the ones after it are forwarded.
func TestRejectedForGood(t *testing.T) {
	up := &upstream{refuse: map[string]error{"r-1": fmt.Errorf("mqtt: publish: %w: bad", transport.ErrInvalidMessage)}}
	b := open(t, filepath.Join(t.TempDir(), "b.db"), up)
	for i := range 3 {
		_ = b.Publish(context.Background(), msg(i))
	}
	flush(t, b)
	if got := up.ids(); fmt.Sprint(got) != "[r-0 r-2]" {
		t.Errorf("forwarded %v; want r-0 and r-2", got)
	}
	if s := b.Stats(); s.Rejected != 1 || s.Pending != 0 {
		t.Errorf("%+v; want 1 rejected", s)
	}
}

// TestOptions: invalid options are errors wrapping ErrInvalidOption; a
// file another Buffer holds cannot be opened twice.
func TestOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	for name, o := range map[string]forward.Option{
		"MaxMessages(0)": forward.MaxMessages(0), "MaxBytes(0)": forward.MaxBytes(0), "WhenFull(9)": forward.WhenFull(9),
		"Window(0)": forward.Window(0), "DedupeWindow(-1)": forward.DedupeWindow(-1), "MaxBackoff(1ms)": forward.MaxBackoff(time.Millisecond),
		"WithLogger(nil)": forward.WithLogger(nil), "nil": nil,
	} {
		if _, err := forward.New(path, &upstream{}, o); !errors.Is(err, forward.ErrInvalidOption) {
			t.Errorf("%s: New = %v; want ErrInvalidOption", name, err)
		}
	}
	if _, err := forward.New(path, nil); !errors.Is(err, forward.ErrInvalidOption) {
		t.Errorf("a nil upstream: %v", err)
	}
	open(t, path, &upstream{})
	if _, err := forward.New(path, &upstream{}); err == nil {
		t.Error("a second Buffer opened the same file")
	}
}
