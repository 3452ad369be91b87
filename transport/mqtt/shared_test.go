package mqtt_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestSharedSubscriptionSplits: two consumers in one group with share=true
// (a shared subscription, each its own client and session) split 200
// messages; every message goes to exactly one of them, and both get some.
// A third subscription outside the group gets all 200. The shared ones
// declare no ordering, and name the option that would keep it.
func TestSharedSubscriptionSplits(t *testing.T) {
	r := shared(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "share") + "/+"
	group := transporttest.UniqueName(t, "g")
	pub := r.open(t)

	var mu sync.Mutex
	seen := map[string][]string{} // ID -> members
	count := map[string]int{}
	consume := func(member string, sub transport.Subscription) {
		tr := r.open(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := tr.Subscribe(ctx, sub)
		if err != nil {
			t.Fatalf("Subscribe %s: %v", member, err)
		}
		if sem, shared := st.Semantics(), member != "other"; shared != (sem.Ordering == transport.OrderNone) ||
			shared != strings.Contains(sem.OrderingHint, "share=false") {
			t.Errorf("%s declares Ordering %v, hint %q", member, sem.Ordering, sem.OrderingHint)
		}
		go func() {
			for {
				d, err := st.Receive(context.Background())
				if err != nil {
					return
				}
				mu.Lock()
				seen[d.Message().ID] = append(seen[d.Message().ID], member)
				count[member]++
				mu.Unlock()
				_ = d.Ack(context.Background())
			}
		}()
	}
	share := map[string]string{mqtt.OptionShare: "true"}
	consume("a", transport.Subscription{Topic: topic, Group: group, Consumer: transporttest.UniqueName(t, "a"), Options: share})
	consume("b", transport.Subscription{Topic: topic, Group: group, Consumer: transporttest.UniqueName(t, "b"), Options: share})
	consume("other", transport.Subscription{Topic: topic, Consumer: transporttest.UniqueName(t, "o")})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	base := topic[:len(topic)-1]
	for i := range n {
		m := &handler.Message{ID: fmt.Sprint("m", i), Topic: base + fmt.Sprintf("dev-%d", i%7), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		done := count["a"]+count["b"] >= n && count["other"] >= n
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let duplicates, if any, arrive
	mu.Lock()
	defer mu.Unlock()
	t.Logf("group member a got %d, b got %d; the non-member got %d", count["a"], count["b"], count["other"])
	if len(seen) != n {
		t.Errorf("%d distinct messages seen, want %d", len(seen), n)
	}
	for id, members := range seen {
		group := 0
		others := 0
		for _, m := range members {
			if m == "other" {
				others++
			} else {
				group++
			}
		}
		if group != 1 || others != 1 {
			t.Errorf("message %s went to %v: want exactly one group member and the non-member once", id, members)
		}
	}
	if count["a"] == 0 || count["b"] == 0 {
		t.Errorf("one member got nothing: a %d, b %d", count["a"], count["b"])
	}
}
