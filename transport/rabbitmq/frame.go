package rabbitmq

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/transport"
)

// This file measures the content header frame amqp091-go writes for a
// publish, so that a message whose properties and headers table do not fit
// the connection's negotiated frame_max is refused before anything is
// written. RabbitMQ answers such a frame with FRAME_ERROR and closes the
// whole connection, failing every publish awaiting its confirm there.

// frameOverhead is the bytes around a frame's payload: type (1), channel
// (2), payload size (4) and frame-end (1).
const frameOverhead = 8

// headerFrameFixed is the fixed part of a content header payload: class
// id, weight, body size and property flags.
const headerFrameFixed = 2 + 2 + 8 + 2

// headerFrameSize returns the size, frame overhead included, of the content
// header frame for p, as amqp091-go encodes it (write.go: headerFrame.write,
// writeTable, writeField). An unsupported header value type is an error
// naming the header.
func headerFrameSize(p *amqp.Publishing) (int, error) {
	n := frameOverhead + headerFrameFixed
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo,
		p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if len(p.Headers) > 0 {
		t, err := tableSize(p.Headers)
		if err != nil {
			return 0, err
		}
		n += t
	}
	return n, nil
}

// tableSize is the encoded size of a field table: its 4-byte length and,
// per entry, the short-string name and the value.
func tableSize(t amqp.Table) (int, error) {
	n := 4
	for k, v := range t {
		f, err := fieldSize(v)
		if err != nil {
			return 0, fmt.Errorf("header %q: %w", k, err)
		}
		n += 1 + len(k) + f
	}
	return n, nil
}

// fieldSize is the encoded size of one field value, its type octet
// included, for the types amqp091-go writes.
func fieldSize(v any) (int, error) {
	switch x := v.(type) {
	case nil:
		return 1, nil
	case bool, byte, int8:
		return 2, nil
	case int16, uint16:
		return 3, nil
	case int, int32, uint32, float32:
		return 5, nil
	case int64, float64, time.Time:
		return 9, nil
	case amqp.Decimal:
		return 6, nil
	case string:
		return 5 + len(x), nil
	case []byte:
		return 5 + len(x), nil
	case amqp.Table:
		t, err := tableSize(x)
		return 1 + t, err
	case []any:
		n := 5
		for _, e := range x {
			f, err := fieldSize(e)
			if err != nil {
				return 0, err
			}
			n += f
		}
		return n, nil
	default:
		return 0, fmt.Errorf("value of type %T cannot be encoded in an AMQP table", v)
	}
}

// largestHeader names the header of p whose encoded entry is the largest,
// and its size: the one to shorten first.
func largestHeader(p *amqp.Publishing) (string, int) {
	name, max := "", 0
	for k, v := range p.Headers {
		f, err := fieldSize(v)
		if err != nil {
			continue
		}
		if s := 1 + len(k) + f; s > max || (s == max && k < name) {
			name, max = k, s
		}
	}
	return name, max
}

// Room kept free in the content header frame. A message grows on its way
// to the DLQ: the broker adds x-delivery-count to every quorum delivery and
// x-death (an entry per queue and reason, x-first-death-* and
// x-last-death-*) when it dead-letters, and the transport's copies add the
// dead-letter record (its error text is the transport's own, short) or the
// retry headers. A frame over frame_max is refused by RabbitMQ from a publisher,
// and by amqp091-go from the broker: a dead letter that no longer fits
// could not even be listed. So Publish leaves publishReserve free, and the
// transport's own copies copyReserve (the delivery count and a death
// entry).
const (
	publishReserve = 8 << 10
	copyReserve    = 512
)

// checkFrame refuses p when its content header frame would leave less than
// reserve bytes of frameMax (the connection's negotiated frame_max; 0 is no
// limit) free. The error wraps transport.ErrInvalidMessage and names the
// largest header, never a value.
func checkFrame(p *amqp.Publishing, frameMax, reserve int) error {
	size, err := headerFrameSize(p)
	if err != nil {
		return fmt.Errorf("%w: %w", transport.ErrInvalidMessage, err)
	}
	if frameMax <= 0 || size <= frameMax-reserve {
		return nil
	}
	name, hsize := largestHeader(p)
	if name == "" {
		return fmt.Errorf("%w: the message's AMQP properties take %d bytes in the content header frame; the connection's frame_max is %d",
			transport.ErrInvalidMessage, size, frameMax)
	}
	return fmt.Errorf("%w: header %q takes %d of the %d bytes of the AMQP content header frame (properties and headers table), over the %d the connection's frame_max of %d allows (%d kept free for the broker's and the dead-letter headers): shorten it or move it into the payload",
		transport.ErrInvalidMessage, name, hsize, size, frameMax-reserve, frameMax, reserve)
}
