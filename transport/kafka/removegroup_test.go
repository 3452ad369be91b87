package kafka_test

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRemoveGroup: the consumer group and its offsets are deleted once its
// members left; a group the cluster does not know is ErrNotFound.
func TestRemoveGroup(t *testing.T) {
	addrs := newCluster(t, 2)
	createTopic(t, addrs, "rmgroup", 2)
	transporttest.RunRemoveGroup(t, open(t, addrs), "rmgroup")
}
