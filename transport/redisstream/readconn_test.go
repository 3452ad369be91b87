package redisstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// TestReadConnSetup: the consumer's own read connection (readconn.go) is
// set up as go-redis sets up its pool's: in the URL's database (entries
// published to database 3 are read, which a connection left in database 0
// could not: its XREADGROUP would find no group) and under the client
// name, reading with XREADGROUP.
func TestReadConnSetup(t *testing.T) {
	requireShared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := uniq("readconn")
	name := "ferry-readconn-" + strings.ReplaceAll(topic, "-", "")
	tr := open(t, "redis://"+sharedAddr+"/3?client_name="+name+"&"+fast)
	c := goredis.NewClient(&goredis.Options{Addr: sharedAddr, DB: 3})
	defer c.Close()
	t.Cleanup(func() { c.Del(context.Background(), topic) })
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", StartAtOldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	for i, id := range []string{"a", "b", "c"} {
		if err := tr.Publish(ctx, &handler.Message{ID: id, Key: "k", Topic: topic, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"a", "b", "c"} {
		d, err := st.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m := d.Message(); m.ID != want || len(m.Payload) != 1 || m.Payload[0] != byte(i) {
			t.Fatalf("received %q %v, want %q [%d]", m.ID, m.Payload, want, i)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.XLen(ctx, topic).Result(); err != nil || n != 3 {
		t.Fatalf("database 3 holds %d entries of %s (%v), want 3", n, topic, err)
	}
	// The read connection now blocks in its next XREADGROUP, named.
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range strings.Split(list, "\n") {
			if strings.Contains(l, " name="+name+" ") && strings.Contains(l, " db=3 ") && strings.Contains(l, " cmd=xreadgroup ") {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s in db 3 reading with XREADGROUP:\n%s", name, list)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
