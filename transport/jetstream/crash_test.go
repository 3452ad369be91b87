package jetstream_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
)

// childEnv makes the test binary run as the consumer that
// TestKill9Redelivers kills, instead of the tests.
const childEnv = "FERRY_JETSTREAM_CRASH_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		crashChild(spec)
		return
	}
	os.Exit(m.Run())
}

// crashChild consumes as a member of a group, acks the first acks
// messages (flushed to the server), receives hold more without settling
// them, reports both on stdout, and waits to be killed.
func crashChild(spec string) {
	var url, topic, group string
	var acks, hold int
	if _, err := fmt.Sscan(strings.ReplaceAll(spec, "|", " "), &url, &topic, &group, &acks, &hold); err != nil {
		fmt.Println("BAD", err)
		os.Exit(2)
	}
	ctx := context.Background()
	tr, err := jetstream.New(ctx, url)
	if err != nil {
		fmt.Println("BAD", err)
		os.Exit(2)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group, Consumer: "child"})
	if err != nil {
		fmt.Println("BAD", err)
		os.Exit(2)
	}
	var acked, held []string
	for len(acked)+len(held) < acks+hold {
		d, err := st.Receive(ctx)
		if err != nil {
			fmt.Println("BAD", err)
			os.Exit(2)
		}
		if len(acked) < acks {
			if err := d.Ack(ctx); err != nil {
				fmt.Println("BAD", err)
				os.Exit(2)
			}
			acked = append(acked, d.Message().ID)
			continue
		}
		held = append(held, d.Message().ID)
	}
	if err := tr.Conn().Flush(); err != nil {
		fmt.Println("BAD", err)
		os.Exit(2)
	}
	fmt.Println("ACKED", strings.Join(acked, ","))
	fmt.Println("HOLDING", strings.Join(held, ","))
	select {} // until kill -9
}

// TestKill9Redelivers: a consumer process (this test binary, re-executed)
// is the group's active member; it acks 50 messages and holds 30 more
// unacked when it is killed with SIGKILL. The other member, a standby in
// this process, takes the lease over once the dead one stops renewing,
// waits one AckWait, and then receives every message the dead one did not
// ack — the 30 it held (attempt 2), and the rest — exactly once each and
// in publish order; none is lost, none of the 50 acked comes back.
func TestKill9Redelivers(t *testing.T) {
	requireShared(t)
	ctx := context.Background()
	topic, group := uniq(t, "kill9"), uniq(t, "g")
	cleanupStream(t, sharedURL, topic)
	// fetch=100: the child is delivered at most 150 of the 400, so that
	// newer messages are left for a standby that pulled too early.
	url := sharedURL + "?ack_wait=2s&lease=1s&fetch_wait=250ms&fetch=100"
	tr := open(t, url)
	const total, acks, hold = 400, 50, 30
	var msgs []*handler.Message
	var want []string
	for i := range total {
		id := fmt.Sprintf("order-%03d", i)
		want = append(want, id)
		msgs = append(msgs, &handler.Message{ID: id, Key: fmt.Sprintf("customer-%d", i%9), Topic: topic})
	}
	// The group exists before the child starts, at the oldest message.
	st0, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group, StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = st0.Close(ctx)
	if err := tr.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%d|%d", childEnv, url, topic, group, acks, hold))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewScanner(out)
	var acked, held []string
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "BAD":
			t.Fatalf("child: %s", lines.Text())
		case "ACKED":
			acked = strings.Split(f[1], ",")
		case "HOLDING":
			held = strings.Split(f[1], ",")
		}
		if held != nil {
			break
		}
	}
	if len(acked) != acks || len(held) != hold {
		t.Fatalf("child acked %d and holds %d", len(acked), len(held))
	}
	standby, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close(ctx)
	expectNothing(t, standby, 500*time.Millisecond, "the standby got a message while the child held the lease")

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()

	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []string
	attempts := map[string]int{}
	for len(got) < total-acks {
		d, err := standby.Receive(rctx)
		if err != nil {
			t.Fatalf("after %d of %d redeliveries: %v", len(got), total-acks, err)
		}
		m := d.Message()
		got = append(got, m.ID)
		attempts[m.ID] = m.Attempt()
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the standby had every unacked message %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	expectNothing(t, standby, time.Second, fmt.Sprintf("one more delivery after all %d", total-acks))
	for i, id := range got {
		if id != want[acks+i] {
			t.Fatalf("redelivered out of order or wrong set at %d: got %s, want %s (all: %v)", i, id, want[acks+i], got)
		}
	}
	for _, id := range held {
		if attempts[id] != 2 {
			t.Errorf("held message %s came back as attempt %d, want 2", id, attempts[id])
		}
	}
}
