package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/benchstat"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The shape of the comparisons with the raw SDK: benchRounds interleaved
// rounds of benchMsgs 1 KiB messages each, the order of the sides rotated
// every round, after one untimed round that warms the emulator up (its
// first round ran at half speed); each reports the median rate of each
// side and the median over the rounds of the per-round ratio to raw.
// Emulator (fauxqs) figures on a shared machine: quote the ratios, not
// the rates. Rounds of 2,000 messages lasted about 0.13 s a side and
// their ratios moved by 0.3 from run to run; 5,000 last about 0.35 s.
const (
	benchRounds = 7
	benchMsgs   = 5000
)

func benchPayload() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// publishRawSDK is the raw client's best publish: SendMessageBatch of ten,
// as many calls in flight as the transport's PublishConcurrency (8).
func publishRawSDK(b *testing.B, c *awssqs.Client, url string, msgs []*handler.Message) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, sqs.DefaultPublishConcurrency)
	for i := 0; i < len(msgs); i += 10 {
		entries := make([]types.SendMessageBatchRequestEntry, 0, 10)
		for j := i; j < min(i+10, len(msgs)); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j - i)), MessageBody: aws.String(string(msgs[j].Payload)),
				MessageAttributes: map[string]types.MessageAttributeValue{"ferry-id": {DataType: aws.String("String"), StringValue: aws.String(msgs[j].ID)}}})
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := c.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
			if err != nil || len(out.Failed) > 0 {
				b.Errorf("SendMessageBatch: %v (%d failed)", err, len(out.Failed))
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// publishFerryAsync: one goroutine, PublishAsync, then Flush.
func publishFerryAsync(b *testing.B, tr *sqs.Transport, msgs []*handler.Message) time.Duration {
	ctx := context.Background()
	var failed atomic.Int32
	start := time.Now()
	for _, m := range msgs {
		if err := tr.PublishAsync(ctx, m, func(err error) {
			if err != nil {
				failed.Add(1)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d publishes failed", n)
	}
	return took
}

// publishFerryBatch: one PublishBatch of every message.
func publishFerryBatch(b *testing.B, tr *sqs.Transport, msgs []*handler.Message) time.Duration {
	start := time.Now()
	if err := tr.PublishBatch(context.Background(), msgs); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// publishFerrySync: 80 goroutines calling Publish (8 calls of 10 in
// flight, the raw side's concurrency), each waiting for its own result.
func publishFerrySync(b *testing.B, tr *sqs.Transport, msgs []*handler.Message) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 10 * sqs.DefaultPublishConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(msgs)); i = next.Add(1) - 1 {
				if err := tr.Publish(context.Background(), msgs[i]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkPublishVsRaw compares, on fauxqs, the raw SDK's best publish
// (SendMessageBatch of ten, eight calls in flight) with Ferry's
// PublishAsync from one goroutine, one PublishBatch, and 80 concurrent
// Publish callers, all at the transport's default PublishConcurrency (8
// calls in flight): benchRounds interleaved rounds of benchMsgs 1 KiB
// messages, each side on a queue of its own, counted after each round.
func BenchmarkPublishVsRaw(b *testing.B) {
	tr := open(b)
	c := tr.Client()
	ctx := context.Background()
	payload := benchPayload()
	sides := []string{"raw", "async", "batch", "sync"}
	rates := make(map[string][]float64)
	cpus := make(map[string][]float64) // client CPU µs per message
	b.ResetTimer()
	for r := -1; r < benchRounds; r++ { // round -1 warms fauxqs up, untimed
		b.StopTimer()
		queues := make(map[string]sqs.QueueInfo)
		msgs := make(map[string][]*handler.Message)
		for _, s := range sides {
			name := fmt.Sprintf("%s-%s-%d", transporttest.UniqueName(b, "pub"), s, r)
			info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name})
			if err != nil {
				b.Fatal(err)
			}
			queues[s] = info
			for i := range benchMsgs {
				msgs[s] = append(msgs[s], &handler.Message{ID: fmt.Sprintf("m%d", i), Topic: name, Payload: payload})
			}
		}
		// Warm the transport's queue resolution outside the timing.
		for _, s := range sides[1:] {
			if err := tr.Publish(ctx, &handler.Message{ID: "warm", Topic: queues[s].Name, Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		for i := range sides {
			s := sides[(i+r+len(sides))%len(sides)]
			var took time.Duration
			c0 := benchstat.CPUTime()
			switch s {
			case "raw":
				took = publishRawSDK(b, c, queues[s].URL, msgs[s])
			case "async":
				took = publishFerryAsync(b, tr, msgs[s])
			case "batch":
				took = publishFerryBatch(b, tr, msgs[s])
			case "sync":
				took = publishFerrySync(b, tr, msgs[s])
			}
			if r >= 0 {
				cpus[s] = append(cpus[s], float64((benchstat.CPUTime()-c0).Microseconds())/benchMsgs)
				rates[s] = append(rates[s], benchMsgs/took.Seconds())
			}
		}
		b.StopTimer()
		for _, s := range sides {
			want := benchMsgs
			if s != "raw" {
				want++ // the warm-up message
			}
			if got := queueDepth(b, c, queues[s].URL); got != want {
				b.Fatalf("%s: queue holds %d messages, want %d", s, got, want)
			}
			deleteQueue(b, tr, queues[s].URL)
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, s := range sides {
		b.ReportMetric(benchstat.Median(rates[s]), s+"-msgs/s")
		b.ReportMetric(benchstat.Median(cpus[s]), s+"-cpu-µs/msg")
		if s != "raw" {
			b.ReportMetric(benchstat.Median(ratios(rates[s], rates["raw"])), s+"/raw")
		}
	}
	b.Logf("rounds of %d: raw %v msg/s; async %v (ratios %.2f); batch %v (%.2f); sync %v (%.2f)", benchMsgs,
		benchstat.Rounded(rates["raw"]), benchstat.Rounded(rates["async"]), ratios(rates["async"], rates["raw"]),
		benchstat.Rounded(rates["batch"]), ratios(rates["batch"], rates["raw"]), benchstat.Rounded(rates["sync"]), ratios(rates["sync"], rates["raw"]))
}

// queueDepth is the queue's ApproximateNumberOfMessages.
func queueDepth(b *testing.B, c *awssqs.Client, url string) int {
	out, err := c.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		b.Fatal(err)
	}
	n, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	return n
}

// consumeRouter drains n messages through a Router on the transport
// (4 pollers, 16 handler workers, a handler that only counts), from Ready
// to the Router's Close, which flushes the batched deletes.
func consumeRouter(b *testing.B, tr *sqs.Transport, name string, n int, opts ...ferry.SubscriptionOption) time.Duration {
	r, err := ferry.NewRouter(ferry.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	var handled, sink atomic.Int64
	doneCh := make(chan struct{})
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		sink.Add(int64(len(m.Payload)))
		if handled.Add(1) == int64(n) {
			close(doneCh)
		}
		return nil
	})
	if err := r.Add("bench", tr, transport.Subscription{Topic: name}, h, opts...); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(runCtx) }()
	<-r.Ready()
	start := time.Now()
	select {
	case <-doneCh:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := r.Close(cctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkConsumeVsRaw compares, on fauxqs, draining a queue of
// benchMsgs 1 KiB messages with the raw SDK (4 workers looping
// ReceiveMessage of ten, long poll, and DeleteMessageBatch) and through a
// Router on the transport (4 pollers, 16 workers), with the Router's
// default MaxInFlight (1024, which overrides the transport's 100) and
// with MaxInFlight(100): benchRounds interleaved rounds.
func BenchmarkConsumeVsRaw(b *testing.B) {
	tr := open(b)
	c := tr.Client()
	ctx := context.Background()
	sides := []string{"raw", "router", "router100"}
	rates := make(map[string][]float64)
	cpus := make(map[string][]float64) // client CPU µs per message
	b.ResetTimer()
	for r := -1; r < benchRounds; r++ { // round -1 warms fauxqs up, untimed
		for i := range sides {
			s := sides[(i+r+len(sides))%len(sides)]
			b.StopTimer()
			name := fmt.Sprintf("%s-%s-%d", transporttest.UniqueName(b, "con"), s, r)
			info, err := tr.DeclareQueue(ctx, sqs.Queue{Name: name, VisibilityTimeout: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			fill(b, c, info.URL, benchMsgs)
			b.StartTimer()
			var took time.Duration
			c0 := benchstat.CPUTime()
			switch s {
			case "raw":
				start := time.Now()
				rawConsume(b, c, info.URL, benchMsgs, 4)
				took = time.Since(start)
			case "router":
				took = consumeRouter(b, tr, name, benchMsgs)
			case "router100":
				took = consumeRouter(b, tr, name, benchMsgs, ferry.MaxInFlight(100))
			}
			b.StopTimer()
			if r >= 0 {
				cpus[s] = append(cpus[s], float64((benchstat.CPUTime()-c0).Microseconds())/benchMsgs)
				rates[s] = append(rates[s], benchMsgs/took.Seconds())
			}
			if left := queueDepth(b, c, info.URL); left != 0 {
				b.Errorf("%s: %d messages left", s, left)
			}
			deleteQueue(b, tr, info.URL)
			b.StartTimer()
		}
	}
	b.StopTimer()
	for _, s := range sides {
		b.ReportMetric(benchstat.Median(rates[s]), s+"-msgs/s")
		b.ReportMetric(benchstat.Median(cpus[s]), s+"-cpu-µs/msg")
		if s != "raw" {
			b.ReportMetric(benchstat.Median(ratios(rates[s], rates["raw"])), s+"/raw")
		}
	}
	b.Logf("rounds of %d: raw %v msg/s; router %v (ratios %.2f); router MaxInFlight(100) %v (%.2f)", benchMsgs,
		benchstat.Rounded(rates["raw"]), benchstat.Rounded(rates["router"]), ratios(rates["router"], rates["raw"]),
		benchstat.Rounded(rates["router100"]), ratios(rates["router100"], rates["raw"]))
}

func ratios(xs, base []float64) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		out[i] = xs[i] / base[i]
	}
	return out
}
