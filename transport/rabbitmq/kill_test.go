package rabbitmq_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

const killChildEnv = "FERRY_RABBITMQ_KILL_CHILD"

// TestKillConsumer kills -9 a consumer process holding unacked messages
// (mid-batch: it acked every other message it received and holds the
// rest) and shows another consumer of the group then receives every
// message the dead one did not ack, with the broker's attempt count raised
// for the ones it held, and nothing is lost.
func TestKillConsumer(t *testing.T) {
	if topic := os.Getenv(killChildEnv); topic != "" {
		killChild(topic)
		return
	}
	tr := open(t)
	ctx := context.Background()
	topic := transporttest.UniqueName(t, "kill")
	cleanupSub(t, brokerURL(), topic, "g", 0)
	sub := transport.Subscription{Topic: topic, Group: "g"}
	st, err := tr.Subscribe(ctx, sub) // declares the queue
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	const total = 200
	msgs := make([]*handler.Message, total)
	for i := range msgs {
		msgs[i] = &handler.Message{ID: "m" + strconv.Itoa(i), Key: "k" + strconv.Itoa(i%7), Topic: topic, Payload: []byte("x")}
	}
	if err := transport.PublishBatch(ctx, tr, msgs); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKillConsumer$", "-test.v=false")
	cmd.Env = append(os.Environ(), killChildEnv+"="+topic, "FERRY_AMQP_URL="+brokerURL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	held := map[string]bool{}
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "ACK" {
			acked[f[1]] = true
		} else if len(f) == 2 && f[0] == "HOLD" {
			held[f[1]] = true
		} else if len(f) == 1 && f[0] == "READY" {
			ready = true
			break
		}
	}
	if !ready {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child consumer did not get ready: %v", sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) == 0 || len(held) == 0 {
		t.Fatalf("child acked %d and held %d; want some of each", len(acked), len(held))
	}

	st2, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close(ctx)
	got := map[string]int{}
	dups, prefetched := 0, 0
	for len(got) < total-len(acked) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := st2.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("after the kill: received %d of the %d messages not acked: %v", len(got), total-len(acked), err)
		}
		m := d.Message()
		switch {
		case acked[m.ID]:
			dups++ // an ack still in the dead process's socket: allowed, at least once
		case held[m.ID]:
			if m.Attempt() != 2 {
				t.Errorf("held message %s: attempt %d, want 2 (the broker's count)", m.ID, m.Attempt())
			}
			got[m.ID]++
		default:
			// Never handled by the child, but perhaps prefetched by it.
			if a := m.Attempt(); a != 1 && a != 2 {
				t.Errorf("message %s not handled by the child: attempt %d, want 1 or 2", m.ID, a)
			} else if a == 2 {
				prefetched++
			}
			got[m.ID]++
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs {
		if !acked[m.ID] && got[m.ID] != 1 {
			t.Errorf("message %s: received %d times after the kill, want 1", m.ID, got[m.ID])
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if d, err := st2.Receive(rctx); err == nil {
		t.Errorf("unexpected extra delivery %s", d.Message().ID)
	}
	if prefetched > 50-len(held) {
		t.Errorf("%d messages came back with attempt 2 besides the held ones: more than the child's prefetch", prefetched)
	}
	t.Logf("child acked %d, held %d unacked when killed; %d more were prefetched by it; %d redelivered acks",
		len(acked), len(held), prefetched, dups)
}

// killChild consumes with prefetch 50, acks every other message, holds the
// others, and reports READY after 60 messages, then waits to be killed.
func killChild(topic string) {
	ctx := context.Background()
	tr, err := rabbitmq.New(ctx, brokerURL(), rabbitmq.Prefetch(50))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; i < 60; i++ {
		d, err := st.Receive(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if i%2 == 0 {
			if err := d.Ack(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Fprintln(w, "ACK", d.Message().ID)
		} else {
			fmt.Fprintln(w, "HOLD", d.Message().ID)
		}
	}
	fmt.Fprintln(w, "READY")
	_ = w.Flush()
	select {}
}
