package kafka_test

import (
	"testing"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// harness runs the suite on one in-process kfake cluster; each Open is a
// new client, as a separate process would have.
type harness struct{ addrs []string }

func (h harness) Open(tb testing.TB) transport.Transport { return open(tb, h.addrs) }

// MakeTopic creates the topic with 4 partitions, so that two members of a
// group can share it.
func (h harness) MakeTopic(tb testing.TB, name string) string {
	createTopic(tb, h.addrs, name, 4)
	return name
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness{addrs: newCluster(t, 4)})
}

func BenchmarkConformance(b *testing.B) {
	transporttest.RunBenchmarks(b, harness{addrs: newCluster(b, 4)})
}
