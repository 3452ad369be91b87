package rabbitmq

import (
	"time"

	"github.com/ferrymq/ferry/handler"
)

// PublishedHeaderFrameSize is the size of the content header frame Publish
// writes for m (with a routing key, as a Key gives).
func PublishedHeaderFrameSize(m *handler.Message) int {
	p := toPublishing(m, time.Now())
	n, err := headerFrameSize(&p)
	if err != nil {
		panic(err)
	}
	return n
}

// FrameMax is the negotiated frame_max of t's current connection.
func FrameMax(t *Transport) int {
	s := t.conn.current()
	if s == nil {
		return 0
	}
	return s.conn.Config.FrameSize
}

// FrameMaxDefault is RabbitMQ's default frame_max.
const FrameMaxDefault = 131072

// PublishReserve is the room Publish keeps free in the header frame.
const PublishReserve = publishReserve
