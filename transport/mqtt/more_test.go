package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestConcurrentPublishesKeepSequence: 16 goroutines publish 1,600
// messages to two topics through one Transport; the consumer receives
// every one, each topic in sequence-number order, and sees no gap (a
// publish handed to the connection out of number order would look like
// one).
func TestConcurrentPublishesKeepSequence(t *testing.T) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	rec := &logRecorder{}
	cons, pub := r.open(t, mqtt.WithLogger(slog.New(rec))), r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := cons.Subscribe(ctx, transport.Subscription{Topic: "seq/+", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	const workers, each = 16, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := &handler.Message{ID: fmt.Sprint(w, "-", i), Topic: fmt.Sprint("seq/", (w+i)%2), Payload: []byte("x")}
				if err := pub.Publish(ctx, m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	for len(seen) < workers*each {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d: %v", len(seen), err)
		}
		seen[d.Message().ID] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if n := cons.Missing(); n != 0 {
		t.Errorf("Missing() = %d with nothing lost: publishes left out of sequence order", n)
	}
	if n := rec.count(slog.LevelError, "missing"); n != 0 {
		t.Errorf("%d gap lines logged with nothing lost", n)
	}
}

// TestAckAfterReconnectIsRevoked: a message received on a connection that
// is then lost (the broker restarts) cannot be acked: Ack returns an
// error wrapping transport.ErrRevoked, and the broker redelivers it on the
// new connection with the DUP flag (Facts.Attempt 2). On both protocols.
func TestAckAfterReconnectIsRevoked(t *testing.T) {
	eachProtocol(t, testAckAfterReconnectIsRevoked)
}

func testAckAfterReconnectIsRevoked(t *testing.T, p protocol) {
	b := startPrivateBroker(t)
	r := newReaper(t, b.addr())
	tr := r.open(t, p.opt(), mqtt.MaxReconnectInterval(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: "revoked", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "m1", Topic: "revoked", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil || d.Message().Facts().Attempt != 1 {
		t.Fatalf("Receive = %v, %v", d, err)
	}
	b.restart()
	again, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ack(ctx); !errors.Is(err, transport.ErrRevoked) {
		t.Errorf("Ack on the lost connection = %v; want ErrRevoked", err)
	}
	if again.Message().ID != "m1" || again.Message().Facts().Attempt != 2 {
		t.Errorf("redelivered %q attempt %d; want m1, attempt 2", again.Message().ID, again.Message().Facts().Attempt)
	}
	if err := again.Ack(ctx); err != nil {
		t.Errorf("Ack of the redelivery: %v", err)
	}
}

// TestPublishRetained: a retained message reaches a subscriber that
// subscribes after it was published, with its ID; an ordinary one does
// not. On both protocols.
func TestPublishRetained(t *testing.T) {
	eachProtocol(t, testPublishRetained)
}

func testPublishRetained(t *testing.T, p protocol) {
	r := shared(t)
	tr := r.open(t, p.opt())
	topic := "ferry-test/" + transporttest.UniqueName(t, "retained")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, &handler.Message{ID: "plain", Topic: topic, Payload: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := tr.PublishRetained(ctx, &handler.Message{ID: "state", Topic: topic, Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	defer func() { // clear the retained message: an empty raw payload, retained
		raw := r.open(t, p.opt(), mqtt.PayloadFormat(mqtt.Raw))
		_ = raw.PublishRetained(context.Background(), &handler.Message{Topic: topic})
	}()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: transporttest.UniqueName(t, "g")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message().ID != "state" {
		t.Errorf("a new subscriber got %q; want the retained message", d.Message().ID)
	}
	_ = d.Ack(ctx)
	qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer qcancel()
	if d, err := st.Receive(qctx); err == nil {
		t.Errorf("a new subscriber also got %q", d.Message().ID)
	}
}

// TestClaimTopicDenied: on a broker whose ACL denies ferry/session/#, a
// stream logs a warning that takeover detection is off, and works.
func TestClaimTopicDenied(t *testing.T) {
	dir := t.TempDir()
	acl := filepath.Join(dir, "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite acl/#\ntopic readwrite ferry/dlq/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startPrivateBroker(t, "acl_file "+acl)
	r := newReaper(t, b.addr())
	rec := &logRecorder{}
	tr := r.open(t, mqtt.WithLogger(slog.New(rec)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: "acl/t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "m1", Topic: "acl/t", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil || d.Message().ID != "m1" {
		t.Fatalf("Receive = %v, %v", d, err)
	}
	_ = d.Ack(ctx)
	if n := rec.count(slog.LevelWarn, "a takeover of this session by another process will not be detected"); n != 1 {
		t.Errorf("%d warnings about the refused claim topic, want 1", n)
	}
}
