package mqtt

// Messages the broker drops. Mosquitto queues at most max_queued_messages
// (1000 by default) for a session whose client is away or behind, and
// drops the rest without telling anyone. Every envelope carries its
// publisher's ID and a sequence number, counted per topic by each
// Transport and handed to the connection in that order; a stream that is
// the only consumer of its session sees every number of every publisher
// and topic it receives, once at least, in order. A number further ahead
// than the next one means the messages in between were never delivered:
// the stream logs it at level Error and counts it in Transport.Missing.
//
// Redeliveries (a number seen before) are not gaps. The first message of a
// publisher and topic sets the starting point, as does a retained message
// (the last of its topic, whatever came before). A shared subscription
// sees only its share, so it does not look for gaps.

// maxTracked bounds the publishers × topics a stream remembers; past it,
// it forgets them all and starts again from the next message of each.
const maxTracked = 1 << 16

// pubTopic is one publisher's messages on one topic.
type pubTopic struct{ pub, topic string }

// gapTracker remembers, per publisher and topic, the last number a stream
// received. It is used from Receive's goroutine only.
type gapTracker struct {
	last map[pubTopic]uint64
}

// see records number seq of pub on topic, and reports a gap before it.
func (g *gapTracker) see(s *stream, pub, topic string, seq uint64, retained bool) {
	k := pubTopic{pub, topic}
	last, ok := g.last[k]
	switch {
	case !ok || retained:
		if !ok && len(g.last) >= maxTracked {
			clear(g.last)
		}
		g.last[k] = seq
	case seq <= last: // a redelivery
	case seq == last+1:
		g.last[k] = seq
	default:
		n := seq - last - 1
		g.last[k] = seq
		s.t.missing.Add(int64(n))
		s.log.Error("mqtt: messages missing: the broker did not deliver them to this session. "+
			"Mosquitto drops messages beyond max_queued_messages (1000 by default) for a session that is away or behind: "+
			"raise it (0 = no limit) in mosquitto.conf",
			"topic", topic, "publisher", pub, "after_seq", last, "next_seq", seq, "missing", n)
	}
}
