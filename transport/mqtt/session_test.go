package mqtt_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// Environment of the child consumer of TestPersistentSessionKill.
const (
	envChild     = "FERRY_MQTT_CHILD"      // "hold" or "ackall"
	envChildAddr = "FERRY_MQTT_CHILD_ADDR" // broker
	envChildSub  = "FERRY_MQTT_CHILD_SUB"  // topic
	envChildID   = "FERRY_MQTT_CHILD_ID"   // client ID
)

// TestChildConsumer is the child process of TestPersistentSessionKill. In
// "hold" mode it acks messages with seq < 10 and holds the rest unacked; in
// "ackall" mode it acks everything. It prints "recv <seq>" for every
// message and "acked <seq>" after each Ack returns.
func TestChildConsumer(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("run by TestPersistentSessionKill")
	}
	ctx := context.Background()
	tr, err := mqtt.New(ctx, "mqtt://"+os.Getenv(envChildAddr))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: os.Getenv(envChildSub), Consumer: os.Getenv(envChildID)})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	for {
		d, err := st.Receive(ctx)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		seq := string(d.Message().Payload)
		fmt.Println("recv", seq)
		n, _ := strconv.Atoi(seq)
		if mode == "ackall" || n < 10 {
			if err := d.Ack(ctx); err != nil {
				fmt.Println("error", err)
			}
			fmt.Println("acked", seq)
		}
	}
}

// child is a running child consumer.
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, mode, topic, id string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildConsumer$", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envChildAddr+"="+brokerAddr(), envChildSub+"="+topic, envChildID+"="+id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024)}
	go func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}(out)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c.await(t, func(l string) bool { return l == "ready" }, "the child to subscribe")
	return c
}

// await reads the child's lines until done returns true.
func (c *child) await(t *testing.T, done func(string) bool, what string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited while waiting for %s", what)
			}
			if strings.HasPrefix(l, "error") {
				t.Fatalf("child: %s", l)
			}
			if done(l) {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestPersistentSessionKill: a consumer acks messages 0-9 of 20 and holds
// 10-19 unacked; it is killed with SIGKILL; 10 more (20-29) are published
// while it is dead; restarted with the same client ID it receives every
// message it had not acked and every one published meanwhile (10-29), and
// none it had acked.
func TestPersistentSessionKill(t *testing.T) {
	r := shared(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "kill")
	id := transporttest.UniqueName(t, "c")
	r.add(id)
	pub := r.open(t)
	publish := func(from, to int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := from; i < to; i++ {
			if err := pub.Publish(ctx, &handler.Message{ID: "m" + strconv.Itoa(i), Topic: topic, Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}

	first := startChild(t, "hold", topic, id)
	publish(0, 20)
	recv, acked := map[int]bool{}, map[int]bool{}
	first.await(t, func(l string) bool {
		f := strings.Fields(l)
		if len(f) == 2 {
			n, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "recv":
				recv[n] = true
			case "acked":
				acked[n] = true
			}
		}
		return len(recv) == 20 && len(acked) == 10
	}, "20 messages received and 10 acked")
	// Ack queues the PUBACK on paho's outbound channel; MQTT gives a client
	// no confirmation that it left the socket. Give the writer a moment, so
	// that "acked" means acked at the broker when the kill comes; without
	// it a PUBACK still in the buffer is lost with the process and that
	// message comes back (a duplicate, which at-least-once allows).
	time.Sleep(500 * time.Millisecond)
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	publish(20, 30)
	second := startChild(t, "ackall", topic, id)
	again := map[int]int{}
	want := 20
	second.await(t, func(l string) bool {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "recv" {
			n, _ := strconv.Atoi(f[1])
			again[n]++
		}
		have := 0
		for i := 10; i < 30; i++ {
			if again[i] > 0 {
				have++
			}
		}
		return have == want
	}, "the unacked and the new messages after the restart")
	for i := range 10 {
		if again[i] > 0 {
			t.Errorf("message %d was acked before the kill but delivered again", i)
		}
	}
	t.Logf("after kill -9 and restart: received %d distinct messages (10 unacked, 10 published while down)", len(again))
}
