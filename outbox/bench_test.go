package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/outbox"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// BenchmarkRelay measures outbox publish throughput: b.N committed rows
// (1 KB payloads over 1000 keys) drained by 1 or 4 relays, in rows per
// second, to the memory transport and to Redis Streams. "direct" publishes
// the same messages with transport.PublishBatch in batches of 256, without
// the outbox: the ceiling the relay is measured against.
func BenchmarkRelay(b *testing.B) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	msg := func(topic string, i int) *handler.Message {
		return &handler.Message{ID: fmt.Sprintf("evt-%d", i), Key: fmt.Sprintf("order-%04d", i%1000), Topic: topic,
			Payload: payload, Headers: map[string]string{"type": "OrderPlaced"}}
	}
	brokers := []struct {
		name string
		open func(b *testing.B) transport.Publisher
	}{
		{"memory", func(b *testing.B) transport.Publisher {
			m, err := memory.New(context.Background(), "memory://?retention=1000")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close(context.Background()) })
			return m
		}},
		{"redis", func(b *testing.B) transport.Publisher {
			transporttest.RequireBroker(b, "redis", redisURL())
			t, err := transport.Open(context.Background(), redisURL()+"?maxlen=1000")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { t.Close(context.Background()) })
			return t
		}},
	}
	for _, br := range brokers {
		b.Run(br.name+"/direct", func(b *testing.B) {
			pub := br.open(b)
			topic := transporttest.UniqueName(b, "bench")
			if br.name == "redis" {
				b.Cleanup(func() { delStream(topic) })
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			batch := make([]*handler.Message, 0, 256)
			for i := range b.N {
				batch = append(batch, msg(topic, i))
				if len(batch) == cap(batch) || i == b.N-1 {
					if err := transport.PublishBatch(context.Background(), pub, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
		})
		for _, relays := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/relays=%d", br.name, relays), func(b *testing.B) {
				pub := br.open(b)
				db := newPool(b, 16)
				table := freshTable(b, db)
				topic := transporttest.UniqueName(b, "bench")
				if br.name == "redis" {
					b.Cleanup(func() { delStream(topic) })
				}
				fill(b, db, table, b.N, func(i int) *handler.Message { return msg(topic, i) })
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				start := time.Now()
				runRelays(b, db, pub, relays, outbox.Table(table), outbox.Retention(time.Hour), outbox.PollInterval(5*time.Millisecond))
				for pendingRowsFast(b, db, table) > 0 {
					time.Sleep(2 * time.Millisecond)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
			})
		}
	}
}

// fill commits n rows in transactions of 1000.
func fill(b *testing.B, db *pgxpool.Pool, table string, n int, msg func(i int) *handler.Message) {
	ob, err := outbox.New(outbox.Table(table), outbox.NoNotify())
	if err != nil {
		b.Fatal(err)
	}
	for start := 0; start < n; start += 1000 {
		var msgs []*handler.Message
		for i := start; i < min(start+1000, n); i++ {
			msgs = append(msgs, msg(i))
		}
		addTx(b, db, ob, msgs...)
	}
}

func pendingRowsFast(b *testing.B, db *pgxpool.Pool, table string) int {
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT 1 FROM `+table+` WHERE published_at IS NULL LIMIT 1) s`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// delStream deletes a stream a benchmark wrote to Redis.
func delStream(topic string) {
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	c.Del(context.Background(), topic)
}
