package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/transport/kafka"
)

// newCluster starts an in-process kfake cluster for tb and returns its
// broker addresses. Auto-created topics get partitions partitions.
func newCluster(tb testing.TB, partitions int, opts ...kfake.Opt) []string {
	return startCluster(tb, partitions, opts...).ListenAddrs()
}

// startCluster is newCluster returning the cluster, for tests that control
// its answers.
func startCluster(tb testing.TB, partitions int, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// brokerURL is the kafka URL of addrs, with no settings.
func brokerURL(addrs []string) string { return "kafka://" + strings.Join(addrs, ",") }

// fast are the options that keep group changes quick against kfake.
func fast() []kafka.Option {
	return []kafka.Option{
		kafka.SessionTimeout(time.Second),
		kafka.Heartbeat(100 * time.Millisecond),
		kafka.CommitInterval(100 * time.Millisecond),
		kafka.RevokeTimeout(2 * time.Second),
		kafka.DeliveryTimeout(10 * time.Second),
	}
}

// open opens a Transport on addrs and closes it when tb ends.
func open(tb testing.TB, addrs []string, opts ...kafka.Option) *kafka.Transport {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := kafka.New(ctx, brokerURL(addrs), append(fast(), opts...)...)
	if err != nil {
		tb.Fatalf("kafka.New: %v", err)
	}
	tb.Cleanup(func() { _ = t.Close(context.Background()) })
	return t
}

// createTopic creates topic with n partitions.
func createTopic(tb testing.TB, addrs []string, topic string, n int32) {
	tb.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	a, err := sarama.NewClusterAdmin(addrs, cfg)
	if err != nil {
		tb.Fatalf("admin: %v", err)
	}
	defer a.Close()
	if err := a.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1}, false); err != nil {
		tb.Fatalf("create topic %s: %v", topic, err)
	}
}
