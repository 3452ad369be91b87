package redisstream

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestMoverFollowsStreams: a Transport's mover of delayed messages runs
// while it has a stream open and stops once the last one closed (it
// would poll Redis every 100ms for nothing); a new Subscribe starts it
// again, and that mover moves a message another Transport delayed; after
// PublishAt it runs until Close.
func TestMoverFollowsStreams(t *testing.T) {
	addr := "127.0.0.1:6379"
	transporttest.RequireBroker(t, "redis", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "redis://" + addr + "?block=200ms&claim_idle=2s&claim_interval=200ms&lease=1s"
	tr, err := New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	topic := fmt.Sprintf("mover-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		c.Del(context.Background(), topic, "ferry:"+topic+":"+DefaultGroup+":members", "ferry:"+topic+":"+DefaultGroup+":lease:0")
	})
	running := func() bool {
		tr.delay.mu.Lock()
		defer tr.delay.mu.Unlock()
		return tr.delay.running
	}
	waitFor := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); running() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("mover running %v; want %v %s", !want, want, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if running() {
		t.Fatal("mover running before any Subscribe or PublishAt")
	}
	sub := transport.Subscription{Topic: topic, StartAtOldest: true}
	st, err := tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("with a stream open", true)
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("once its last stream closed", false)

	// Another Transport delays a message and does not move it (closed).
	pub, err := New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.PublishAt(ctx, &handler.Message{ID: "later", Key: "k", Topic: topic, Payload: []byte("p")}, time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = tr.Subscribe(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	waitFor("after a new Subscribe", true)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	d, err := st.Receive(rctx)
	if err != nil {
		t.Fatalf("the delayed message was not moved by the re-subscribed Transport: %v", err)
	}
	if d.Message().ID != "later" {
		t.Fatalf("received %q; want the delayed message", d.Message().ID)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("once its last stream closed again", false)

	if err := tr.PublishAt(ctx, &handler.Message{ID: "past", Topic: topic}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor("after PublishAt", true)
	time.Sleep(3 * delayPoll)
	if !running() {
		t.Fatal("mover stopped after PublishAt with no stream open")
	}
}
