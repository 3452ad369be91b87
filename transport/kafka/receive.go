package kafka

import (
	"context"
	"fmt"

	"github.com/ferrymq/ferry/transport"
)

// Receive returns the next message of any partition this member owns,
// skipping those of partitions revoked since they were fetched.
//
// A record that cannot be decoded is never returned: Receive writes it to
// the group's DLQ and finishes it, then goes on. If that write fails,
// Receive returns the error and keeps the record first in line, unfinished
// (the partition's commit holds at it); the next Receive tries the write
// again. Likewise a failed group session is returned once, and the next
// Receive joins the group again. Either way the caller (the Router) owns
// the backoff between the two calls.
func (s *stream) Receive(ctx context.Context) (transport.Delivery, error) {
	if s.mustRejoin {
		s.mustRejoin = false
		notify(s.rejoin)
	}
	for {
		for len(s.buf) > 0 {
			d := s.buf[0]
			if d.attempt == 0 && !d.rec.p.stopping() {
				if err := s.deadLetterPoison(ctx, d.rec); err != nil {
					return nil, err // d stays first in line
				}
				s.buf[0] = nil
				s.buf = s.buf[1:]
				continue
			}
			s.buf[0] = nil
			s.buf = s.buf[1:]
			if d.rec.p.stopping() {
				d.rec.p.drop()
				continue
			}
			return d, nil
		}
		select {
		case s.buf = <-s.out:
		case err := <-s.failed:
			s.mustRejoin = true
			return nil, fmt.Errorf("kafka: consume %s as group %s: the group session failed; the next Receive joins again: %w", s.topic, s.group, err)
		case <-s.closing:
			return nil, transport.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
