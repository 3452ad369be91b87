package mqtt

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/ferrymq/ferry/transport"
)

// session5 is a conn5's MQTT 5 session state: paho.golang's own
// (state.State, in memory, kept across reconnects), with three things
// added where paho calls it:
//
//   - Acknowledgements of received messages. On a manual-ack connection
//     paho's own call after the handlers is ignored, and the stream's
//     ackQueue sends each one through ack, already in arrival order, at
//     once (paho's manual acks wait for a 50ms timer). An ack for a
//     message of a connection that is gone is dropped, under the same lock
//     as the connection change, so that it can never reach the new
//     connection (the broker redelivers the message there).
//   - Publish outcomes. A publish's token rides in its context into
//     AddToSession, which records it by packet identifier once the packet
//     is in the session and releases the caller with a stand-in answer
//     (conn5.publish returns once the packet is written, without
//     waiting). PacketReceived
//     completes the token with the broker's PUBACK, PUBCOMP or refusing
//     PUBREC, even one that comes after a reconnect, when paho resends
//     the publish in the resumed session.
//   - The reason of a DISCONNECT from the broker (0x8E: session taken
//     over), passed on before paho tears the connection down.
type session5 struct {
	*state.State
	manual       bool
	disconnected func(code byte, reason string)

	mu   sync.Mutex    // held around acks and connection changes
	gen  atomic.Uint64 // connections so far; written under mu
	live bool
	conn io.Writer // the current connection, while live
	buf  []byte    // ackAll's scratch, under mu

	tmu     sync.Mutex
	byID    map[uint16]*token5           // publishes in the session, by packet identifier
	pending map[*packets.Publish]*token5 // publishes being added (their identifier may not be final)

	// released are the stand-in answers AddToSession gives paho's Publish
	// at QoS 1 (a PUBACK) and 2 (a PUBCOMP): success, no properties. paho
	// only reads them.
	released [3]packets.ControlPacket
}

func newSession5(manual bool, disconnected func(byte, string)) *session5 {
	return &session5{
		State:        state.NewInMemory(),
		manual:       manual,
		disconnected: disconnected,
		byID:         make(map[uint16]*token5),
		pending:      make(map[*packets.Publish]*token5),
		released: [3]packets.ControlPacket{
			1: {FixedHeader: packets.FixedHeader{Type: packets.PUBACK}, Content: &packets.Puback{Properties: &packets.Properties{}}},
			2: {FixedHeader: packets.FixedHeader{Type: packets.PUBCOMP}, Content: &packets.Pubcomp{Properties: &packets.Properties{}}},
		},
	}
}

// generation returns the current connection's number.
func (s *session5) generation() uint64 { return s.gen.Load() }

// ConAckReceived starts a new connection. If the broker had no session to
// resume, paho forgets the publishes in flight: their tokens fail with an
// unknown outcome.
func (s *session5) ConAckReceived(w io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.State.ConAckReceived(w, cp, ca)
	s.gen.Add(1)
	s.live, s.conn = err == nil, w
	if !ca.SessionPresent {
		s.failAll(fmt.Errorf("%w: %w", transport.ErrUnknownOutcome, errSessionGone))
	}
	return err
}

// ConnectionLost ends the connection; a DISCONNECT's reason is passed on
// first.
func (s *session5) ConnectionLost(dp *packets.Disconnect) error {
	if dp != nil && s.disconnected != nil {
		reason := ""
		if dp.Properties != nil {
			reason = dp.Properties.ReasonString
		}
		s.disconnected(dp.ReasonCode, reason)
	}
	s.mu.Lock()
	s.live, s.conn = false, nil
	s.mu.Unlock()
	return s.State.ConnectionLost(dp)
}

// Ack is paho's acknowledgement after the message handlers returned:
// ignored on a manual-ack connection, where ack sends it.
func (s *session5) Ack(pb *packets.Publish) error {
	if s.manual {
		return nil
	}
	return s.State.Ack(pb)
}

// ack acknowledges the message with packet identifier id that arrived on
// connection gen, if that connection is still the current one.
func (s *session5) ack(qos byte, id uint16, gen uint64) {
	if qos == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live || gen != s.gen.Load() {
		return // the broker redelivers it on the new connection
	}
	_ = s.State.Ack(&packets.Publish{QoS: qos, PacketID: id})
}

// ackAll acknowledges due, in order, each if the connection it arrived on
// is still the current one: the PUBACKs of QoS 1 messages in one write
// (a PUBACK with reason code 0 and no properties is 4 bytes, MQTT 5
// section 3.4.2.1), the PUBRECs of QoS 2 messages through the state,
// which records them.
func (s *session5) ackAll(due []inbound) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		return
	}
	gen := s.gen.Load()
	buf := s.buf[:0]
	for _, in := range due {
		m := in.(*inbound5)
		switch {
		case m.gen != gen || m.p.QoS == 0:
		case m.p.QoS == 1:
			buf = append(buf, packets.PUBACK<<4, 2, byte(m.p.PacketID>>8), byte(m.p.PacketID))
		default:
			buf = s.writeAcks(buf)
			_ = s.State.Ack(&packets.Publish{QoS: m.p.QoS, PacketID: m.p.PacketID})
		}
	}
	s.buf = s.writeAcks(buf)
}

// writeAcks writes buf to the connection, as one write, and returns it
// emptied. paho's writers lock a connection that is a sync.Locker (TLS).
func (s *session5) writeAcks(buf []byte) []byte {
	if len(buf) == 0 {
		return buf
	}
	if l, ok := s.conn.(sync.Locker); ok {
		l.Lock()
		_, _ = s.conn.Write(buf)
		l.Unlock()
	} else {
		_, _ = s.conn.Write(buf)
	}
	return buf[:0]
}

// AddToSession records the token of a publish (from its context) once
// the packet is in the session, and then releases the caller: paho's
// Publish, which waits on resp for the broker's answer, is given at once
// a stand-in answer of success (a PUBACK, or a PUBCOMP at QoS 2, reason
// code 0), so that it returns as soon as it has written the packet. The
// broker's real answer goes to a channel of the state's own, which
// nothing reads (the state sends to it once, and it has room for that):
// PacketReceived completes the token with it, and the token, not paho's
// return value, is the publish's outcome.
func (s *session5) AddToSession(ctx context.Context, p session.Packet, resp chan<- packets.ControlPacket) error {
	tok, _ := ctx.Value(tokenKey{}).(*token5)
	pp, isPub := p.(*packets.Publish)
	if tok == nil || !isPub {
		return s.State.AddToSession(ctx, p, resp)
	}
	s.tmu.Lock()
	s.pending[pp] = tok
	s.tmu.Unlock()
	err := s.State.AddToSession(ctx, p, make(chan packets.ControlPacket, 1))
	s.tmu.Lock()
	delete(s.pending, pp)
	if err == nil {
		s.byID[pp.PacketID] = tok
	}
	s.tmu.Unlock()
	if err == nil {
		tok.stored.Store(true)
		released := s.released[1]
		if pp.QoS == 2 {
			released = s.released[2]
		}
		select {
		case resp <- released:
		default: // paho's channel has room for one answer, and this is the only one
		}
	}
	return err
}

// PacketReceived completes the token of a publish the broker answered.
// The token is taken before paho frees the packet identifier, so that a
// new publish reusing it cannot be completed by mistake.
func (s *session5) PacketReceived(recv *packets.ControlPacket, pubChan chan<- *packets.Publish) error {
	var tok *token5
	var result error
	switch p := recv.Content.(type) {
	case *packets.Puback:
		tok = s.take(p.PacketID)
		result = reasonErr("PUBACK", p.ReasonCode, reasonString(p.Properties))
	case *packets.Pubrec:
		if p.ReasonCode >= 0x80 {
			tok = s.take(p.PacketID)
			result = reasonErr("PUBREC", p.ReasonCode, reasonString(p.Properties))
		}
	case *packets.Pubcomp:
		tok = s.take(p.PacketID)
		if p.ReasonCode >= 0x80 { // 0x92: the broker does not know the message
			result = fmt.Errorf("%w: %w", transport.ErrUnknownOutcome, reasonErr("PUBCOMP", p.ReasonCode, reasonString(p.Properties)))
		}
	}
	err := s.State.PacketReceived(recv, pubChan)
	if tok != nil {
		tok.complete(result)
	}
	return err
}

func reasonString(p *packets.Properties) string {
	if p == nil {
		return ""
	}
	return p.ReasonString
}

// take removes and returns the token of packet identifier id.
func (s *session5) take(id uint16) *token5 {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if tok, ok := s.byID[id]; ok {
		delete(s.byID, id)
		return tok
	}
	for pp, tok := range s.pending {
		if pp.PacketID == id {
			delete(s.pending, pp)
			return tok
		}
	}
	return nil
}

// failAll completes every recorded token with err.
func (s *session5) failAll(err error) {
	s.tmu.Lock()
	toks := make([]*token5, 0, len(s.byID))
	for id, tok := range s.byID {
		toks = append(toks, tok)
		delete(s.byID, id)
	}
	s.tmu.Unlock()
	for _, tok := range toks {
		tok.complete(err)
	}
}

// Close fails the publishes still in flight (the connection is closed for
// good: they may or may not have been delivered) and closes the state.
func (s *session5) Close() error {
	s.failAll(fmt.Errorf("%w: the connection was closed before the broker acknowledged it", transport.ErrUnknownOutcome))
	return s.State.Close()
}

var _ session.SessionManager = (*session5)(nil)

// token5 is the outcome of one MQTT 5 publish.
type token5 struct {
	done   chan struct{}
	err    error
	fired  atomic.Bool
	stored atomic.Bool // in the session: the broker will be sent it
}

func (t *token5) Done() <-chan struct{} { return t.done }
func (t *token5) Error() error          { return t.err }

func (t *token5) complete(err error) {
	if t.fired.CompareAndSwap(false, true) {
		t.err = err
		close(t.done)
	}
}
