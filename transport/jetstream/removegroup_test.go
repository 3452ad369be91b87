package jetstream_test

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestRemoveGroup: the group's durable consumers (one per partition) are
// deleted; a group with none is ErrNotFound.
func TestRemoveGroup(t *testing.T) {
	requireShared(t)
	transporttest.RunRemoveGroup(t, open(t, sharedURL+"?partitions=2"), uniq(t, "rmgroup"))
}
