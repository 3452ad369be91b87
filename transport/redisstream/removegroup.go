package redisstream

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/transport"
)

var _ transport.GroupRemover = (*Transport)(nil)

// RemoveGroup destroys the consumer group sub.Group (DefaultGroup when
// empty) on every shard stream of sub.Topic (XGROUP DESTROY): its
// position and its pending entries go; the entries stay in the stream for
// other groups. Redis cannot tell whether a member is alive, so stop the
// group's consumers first. A group on no shard is an error wrapping
// transport.ErrNotFound.
func (t *Transport) RemoveGroup(ctx context.Context, sub transport.Subscription) error {
	group := sub.Group
	if group == "" {
		group = DefaultGroup
	}
	removed := int64(0)
	for _, key := range t.streamsOf(sub.Topic) {
		n, err := t.c.XGroupDestroy(ctx, key, group).Result()
		if err != nil && !isNoSuchKey(err) {
			return fmt.Errorf("redisstream: remove group %q on %q on %s: %w", group, key, t.cfg.addr, err)
		}
		removed += n
	}
	if removed == 0 {
		return fmt.Errorf("redisstream: remove group %q of %q on %s: no such group: %w", group, sub.Topic, t.cfg.addr, transport.ErrNotFound)
	}
	return nil
}

// isNoSuchKey reports whether err is Redis saying the stream does not
// exist (XGROUP's words for it, or XINFO's).
func isNoSuchKey(err error) bool {
	return goredis.HasErrorPrefix(err, "no such key") || strings.Contains(err.Error(), "requires the key to exist")
}
