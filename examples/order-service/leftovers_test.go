package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/internal/fauxqs"
)

// leftovers lists what a run of shop left on the broker at rawURL: names
// holding the shop, where the broker can list them. MQTT cannot list
// sessions; the run's cleanup reports its errors instead.
func leftovers(t *testing.T, rawURL, shop string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var left []string
	switch scheme(rawURL) {
	case "redis":
		opts, err := goredis.ParseURL(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		keys, err := c.Keys(ctx, "*"+shop+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.Contains(k, ":lease:") { // leases expire by themselves
				left = append(left, k)
			}
		}
	case "amqp":
		conn, err := amqp.Dial(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tp := topology{scheme: "amqp", shop: shop, fanOut: true}
		for _, c := range consumers {
			sub := tp.sub(c)
			q := sub.Topic + "." + sub.Group
			for _, name := range []string{q, q + ".dlq"} {
				ch, err := conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ch.QueueDeclarePassive(name, false, false, false, false, nil); err == nil {
					left = append(left, name)
					_ = ch.Close()
				}
			}
			for _, x := range []string{tp.topic(), q + ".dlx", q + ".dlq"} {
				ch, err := conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				if err := ch.ExchangeDeclarePassive(x, "fanout", false, false, false, false, nil); err == nil {
					left = append(left, "exchange "+x)
					_ = ch.Close()
				}
			}
		}
	case "kafka":
		u, _ := url.Parse(rawURL)
		c, err := sarama.NewClient(strings.Split(u.Host, ","), sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		topics, err := c.Topics()
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range topics {
			if strings.Contains(tp, shop) {
				left = append(left, tp)
			}
		}
	case "nats":
		nc, err := nats.Connect(rawURL, nats.Timeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := njs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		names := js.StreamNames(ctx)
		for n := range names.Name() {
			if strings.Contains(n, shop) {
				left = append(left, "stream "+n)
			}
		}
		if err := names.Err(); err != nil {
			t.Fatal(err)
		}
	case "sqs", "sns":
		cfg := fauxqs.ForTest(t).Config()
		qs, err := sqs.NewFromConfig(cfg).ListQueues(ctx, &sqs.ListQueuesInput{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs.QueueUrls {
			if strings.Contains(q, shop) {
				left = append(left, q)
			}
		}
		ts, err := sns.NewFromConfig(cfg).ListTopics(ctx, &sns.ListTopicsInput{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range ts.Topics {
			if tp.TopicArn != nil && strings.Contains(*tp.TopicArn, shop) {
				left = append(left, *tp.TopicArn)
			}
		}
	}
	return left
}
