package sqs_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, harness{})
}

// fill sends n 1 KiB messages to url with SendMessageBatch.
func fill(b *testing.B, c *awssqs.Client, url string, n int) {
	body := string(make([]byte, 0, 1024))
	for len(body) < 1024 {
		body += "abcdefghijklmnopqrstuvwxyz"
	}
	body = body[:1024]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := 0; i < n; i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, n); j++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j - i)), MessageBody: aws.String(body),
				MessageAttributes: map[string]types.MessageAttributeValue{"ferry-id": {DataType: aws.String("String"), StringValue: aws.String("m" + strconv.Itoa(j))}}})
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

// rawConsume drains n messages with the SDK alone: workers each loop
// ReceiveMessage (10, long poll) then DeleteMessageBatch.
func rawConsume(b *testing.B, c *awssqs.Client, url string, n, workers int) {
	var got atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got.Load() < int64(n) {
				out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
					WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
				if err != nil {
					b.Error(err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				if _, err := c.DeleteMessageBatch(context.Background(), &awssqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: entries}); err != nil {
					b.Error(err)
					return
				}
				got.Add(int64(len(out.Messages)))
			}
		}()
	}
	wg.Wait()
}

// ferryConsume drains n messages through a Ferry stream: workers
// goroutines Receive and Ack; the stream's Close (which flushes the
// batched deletes) is inside the measurement.
func ferryConsume(b *testing.B, tr *sqs.Transport, name string, n, pollers, workers int) {
	ctx := context.Background()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: name, Options: map[string]string{"pollers": strconv.Itoa(pollers)}})
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := st.Receive(rctx)
				if err != nil {
					return
				}
				_ = d.Ack(ctx)
				if got.Add(1) == int64(n) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	if err := st.Close(ctx); err != nil {
		b.Error(err)
	}
}

// BenchmarkFerryVsSDK consumes the same number of 1 KiB messages with the
// raw SDK (4 workers, batched receive, batched delete) and with a Ferry
// stream (4 pollers), alternately, in one run, and reports both rates and
// their ratio (the bar is ferry/sdk >= 0.9). Each op is one round of
// 2,000 messages for each. Emulator figures, not AWS figures.
func BenchmarkFerryVsSDK(b *testing.B) {
	const n = 2000
	tr := open(b)
	c := tr.Client()
	var rawTime, ferryTime time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for round, which := range []string{"sdk", "ferry"} {
			name := fmt.Sprintf("%s-%d-%d", transporttest.UniqueName(b, "bench"), i, round)
			info, err := tr.DeclareQueue(context.Background(), sqs.Queue{Name: name, VisibilityTimeout: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			fill(b, c, info.URL, n)
			b.StartTimer()
			start := time.Now()
			if which == "sdk" {
				rawConsume(b, c, info.URL, n, 4)
				rawTime += time.Since(start)
			} else {
				ferryConsume(b, tr, name, n, 4, 16)
				ferryTime += time.Since(start)
			}
			b.StopTimer()
			deleteQueue(b, tr, info.URL)
		}
	}
	msgs := float64(n * b.N)
	sdkRate, ferryRate := msgs/rawTime.Seconds(), msgs/ferryTime.Seconds()
	b.ReportMetric(sdkRate, "sdk-msgs/s")
	b.ReportMetric(ferryRate, "ferry-msgs/s")
	b.ReportMetric(ferryRate/sdkRate, "ferry/sdk")
}
