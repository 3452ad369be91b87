package watermill_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/watermill"
)

// benchPayload is the 1 KiB payload of every benchmark message.
var benchPayload = func() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}()

// fillFerry writes n messages to stream in Ferry's Redis wire format
// (ferry-id and payload fields), pipelined, untimed.
func fillFerry(b *testing.B, c *goredis.Client, stream string, n int) {
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		pipe := c.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"ferry-id", fmt.Sprint("m-", i), "payload", benchPayload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// fillWatermill writes n messages to stream in watermill-redisstream's
// format (its default marshaller), pipelined, untimed.
func fillWatermill(b *testing.B, c *goredis.Client, stream string, n int) {
	ctx := context.Background()
	var ms redisstream.DefaultMarshallerUnmarshaller
	for start := 0; start < n; start += 1000 {
		pipe := c.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			values, err := ms.Marshal(stream, message.NewMessage(fmt.Sprint("m-", i), benchPayload))
			if err != nil {
				b.Fatal(err)
			}
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: values})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// handle runs one Watermill Router with one consumer handler, which
// touches each payload, on topic of sub until it has handled n messages,
// and returns how long that took from the moment the Router was running
// (its handlers subscribed).
func handle(b *testing.B, sub message.Subscriber, topic string, n int) time.Duration {
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var handled, sink atomic.Int64
	done := make(chan struct{})
	r.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		sink.Add(int64(len(msg.Payload)))
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	start := time.Now()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	elapsed := time.Since(start)
	_ = r.Close()
	return elapsed
}

// viaBridge handles the stream with the handler on Ferry's Redis Streams
// transport (opened by URL) through the bridge, holding up to inFlight
// messages unsettled.
func viaBridge(b *testing.B, stream string, n, inFlight int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := transport.Open(ctx, testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	defer closeConn(b, conn)
	sub, err := watermill.NewSubscriber(conn, transport.Subscription{Group: "bridge", StartAtOldest: true, MaxInFlight: inFlight})
	if err != nil {
		b.Fatal(err)
	}
	return handle(b, sub, stream, n)
}

// viaWatermill handles the stream with the same handler on
// watermill-redisstream, with its defaults, on a client of its own (its
// subscriber's Close closes the client).
func viaWatermill(b *testing.B, stream string, n int) time.Duration {
	opt, err := goredis.ParseURL(testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: goredis.NewClient(opt), ConsumerGroup: "watermill"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return handle(b, sub, stream, n)
}

// BenchmarkHandlerBridgeVsRedisstream runs one Watermill handler over
// pre-filled streams of 1 KiB messages: on Ferry's Redis Streams transport
// through the bridge (with the bridge's default of 16 unsettled, and with
// 1, which is how many watermill-redisstream hands out), and on
// watermill-redisstream, in the same run. Seven rounds, each on fresh
// streams, alternating which goes first; it reports each side's median
// rate and the median over the rounds of the per-round ratios
// (bridge/watermill). The machine is shared, so the median of
// interleaved rounds is the figure to quote.
func BenchmarkHandlerBridgeVsRedisstream(b *testing.B) {
	const rounds = 7
	n := max(b.N/rounds, 5000)
	c := testenv.Redis(b)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	prefix := "ferry-wm-bench-" + hex.EncodeToString(suffix[:]) + "-"
	b.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	b.SetBytes(1024)
	var brs, br1s, wms []float64
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		fs, f1, ws := fmt.Sprint(prefix, "ferry-", r), fmt.Sprint(prefix, "ferry1-", r), fmt.Sprint(prefix, "wm-", r)
		fillFerry(b, c, fs, n)
		fillFerry(b, c, f1, n)
		fillWatermill(b, c, ws, n)
		b.StartTimer()
		var br, br1, wm time.Duration
		if r%2 == 0 {
			br = viaBridge(b, fs, n, 0)
			br1 = viaBridge(b, f1, n, 1)
			wm = viaWatermill(b, ws, n)
		} else {
			wm = viaWatermill(b, ws, n)
			br1 = viaBridge(b, f1, n, 1)
			br = viaBridge(b, fs, n, 0)
		}
		brs = append(brs, float64(n)/br.Seconds())
		br1s = append(br1s, float64(n)/br1.Seconds())
		wms = append(wms, float64(n)/wm.Seconds())
	}
	b.StopTimer()
	ratios, ratios1 := make([]float64, rounds), make([]float64, rounds)
	for i := range wms {
		ratios[i], ratios1[i] = brs[i]/wms[i], br1s[i]/wms[i]
	}
	b.ReportMetric(benchstat.Median(wms), "watermill-msgs/s")
	b.ReportMetric(benchstat.Median(brs), "bridge-msgs/s")
	b.ReportMetric(benchstat.Median(ratios), "bridge/watermill")
	b.ReportMetric(benchstat.Median(ratios1), "bridge1/watermill")
	b.Logf("rounds of %d messages: watermill-redisstream %v msg/s; bridge %v msg/s (ratios %.2f); bridge with 1 unsettled %v msg/s (ratios %.2f)",
		n, benchstat.Rounded(wms), benchstat.Rounded(brs), ratios, benchstat.Rounded(br1s), ratios1)
}
