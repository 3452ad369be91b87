package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrymq/ferry/transport"
)

// LagRow is how far one partition (shard, queue) of a group is behind.
type LagRow struct {
	Topic     string   `json:"topic"`
	Group     string   `json:"group"`
	Partition string   `json:"partition"`
	Messages  int64    `json:"messages"`
	OldestAge Duration `json:"oldest_age"` // 0: unknown or none
}

// Lag returns the lag of group on topic, one row per partition, shard or
// queue ([transport.LagReporter]).
func Lag(ctx context.Context, t transport.Transport, topic, group string) ([]LagRow, error) {
	if topic == "" {
		return nil, fmt.Errorf("%w: give --topic (and --group)", ErrUsage)
	}
	lr, ok := t.(transport.LagReporter)
	if !ok {
		return nil, fmt.Errorf("this transport cannot report lag: %w", errors.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	ls, err := lr.Lag(ctx, transport.Subscription{Topic: topic, Group: group})
	if err != nil {
		return nil, fmt.Errorf("lag of group %q on %s: %w", group, topic, err)
	}
	out := make([]LagRow, len(ls))
	for i, l := range ls {
		out[i] = LagRow{Topic: topic, Group: group, Partition: l.Partition, Messages: l.Messages, OldestAge: Duration(l.OldestAge)}
	}
	return out, nil
}
