package redisstream_test

import (
	"context"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// TestMaxLen: by default, and with maxlen=n, every XADD trims its stream
// (MAXLEN ~, so Redis keeps whole nodes of up to 100 entries beyond n);
// maxlen=0 keeps everything.
func TestMaxLen(t *testing.T) {
	requireShared(t)
	for _, c := range []struct {
		query    string
		min, max int64
	}{
		{"maxlen=10", 10, 10 + 100},
		{"maxlen=0", 500, 500},
	} {
		topic := uniq("maxlen")
		cleanupKeys(t, sharedAddr, topic)
		tr := open(t, "redis://"+sharedAddr+"?"+c.query)
		msgs := make([]*handler.Message, 500)
		for i := range msgs {
			msgs[i] = &handler.Message{Topic: topic, Payload: []byte("x")}
		}
		if err := tr.PublishBatch(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		n, err := tr.Client().XLen(context.Background(), topic).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n < c.min || n > c.max {
			t.Errorf("%s: 500 published, XLEN %d; want %d to %d", c.query, n, c.min, c.max)
		}
	}
}
