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

// gapTracker remembers, per publisher and topic, the last number a stream
// received. It is used from Receive's goroutine only.
type gapTracker struct {
	last map[string]map[string]uint64 // publisher -> topic -> last number
	n    int                          // entries in last
}

// seeGap records, in s's tracker, number seq of pub on topic, and
// reports a gap before it. pub may be a slice of the message; it is
// copied only when new.
func seeGap[P string | []byte](s *stream, pub P, topic string, seq uint64, retained bool) {
	g := &s.gaps
	topics := g.last[string(pub)] // no allocation
	last, ok := topics[topic]
	switch {
	case !ok || retained:
		if !ok {
			if g.n >= maxTracked {
				clear(g.last)
				g.n, topics = 0, nil
			}
			if topics == nil {
				if g.last == nil {
					g.last = make(map[string]map[string]uint64)
				}
				topics = make(map[string]uint64)
				g.last[string(pub)] = topics
			}
			g.n++
		}
		topics[topic] = seq
	case seq <= last: // a redelivery
	case seq == last+1:
		topics[topic] = seq
	default:
		n := seq - last - 1
		topics[topic] = seq
		s.t.missing.Add(int64(n))
		s.log.Error("mqtt: messages missing: the broker did not deliver them to this session. "+
			"Mosquitto drops messages beyond max_queued_messages (1000 by default) for a session that is away or behind: "+
			"raise it (0 = no limit) in mosquitto.conf",
			"topic", topic, "publisher", string(pub), "after_seq", last, "next_seq", seq, "missing", n)
	}
}
