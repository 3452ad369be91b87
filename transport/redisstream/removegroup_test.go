package redisstream_test

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRemoveGroup: XGROUP DESTROY on every shard of the topic; a group
// that is not there is ErrNotFound.
func TestRemoveGroup(t *testing.T) {
	requireShared(t)
	topic := uniq("rmgroup")
	cleanupKeys(t, sharedAddr, topic)
	transporttest.RunRemoveGroup(t, open(t, "redis://"+sharedAddr+"/0?shards=2&"+fast), topic)
}
