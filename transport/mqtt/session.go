package mqtt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Session takeover. Two live connections with one client ID take the
// session from each other: the broker closes the older one, and a client
// that reconnects takes it back, for ever. MQTT 3.1.1 gives the closed
// connection no reason, so each stream claims its session instead:
//
//   - Before connecting, Subscribe has the Transport's publishing
//     connection (a clean session, so nothing queues ahead of what it
//     receives) subscribe to the session's claim topic,
//     ferry/session/<hash of the client ID>, then publish the stream's
//     claim there, a random token, retained, and wait for it to come back.
//   - Whatever arrives on that topic before the own claim is older (the
//     retained claim of an earlier holder). A claim of another token that
//     arrives after it, live or retained (after a reconnect of the
//     publishing connection, which subscribes again), is newer: the stream
//     has been taken over. It logs it once at level Error, disconnects
//     without reconnecting, and Receive, Ack and Nack return
//     ErrTakenOver.
//
// A newer stream publishes its claim before it connects, so the older one
// usually leaves before the broker would close its connection. If the
// older one reconnects first (its client library retries at once), it
// closes the newer one's connection once, which reconnects, and
// redelivery brings back what it had not acked. The stream's own session
// never subscribes to the claim topic: a backlog queued there would hold
// the claim back.

// sessionClaim is a stream's claim on its persistent session.
type sessionClaim struct {
	topic   string // sessionTopicPrefix + hash of the client ID
	token   string // this stream's, random
	payload []byte // the claim document
	seenOwn bool   // the own claim arrived; the publishing connection's goroutine only
}

// claimDoc is the claim document: the token, and who claimed, for the
// log line of the stream taken over.
type claimDoc struct {
	Claim string `json:"claim"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	At    string `json:"at,omitempty"`
}

// claimTopic is the claim topic of the session of client ID id.
func claimTopic(id string) string {
	sum := sha256.Sum256([]byte(id))
	return sessionTopicPrefix + hex.EncodeToString(sum[:12])
}

func newClaim(clientID string) sessionClaim {
	host, _ := os.Hostname()
	c := claimDoc{Claim: randomSuffix() + randomSuffix(), Host: host, PID: os.Getpid(), At: time.Now().UTC().Format(time.RFC3339Nano)}
	payload, _ := json.Marshal(c) // strings and an int always marshal
	return sessionClaim{topic: claimTopic(clientID), token: c.Claim, payload: payload}
}

// claimWait bounds how long Subscribe waits for the stream's own claim to
// come back; it comes within milliseconds unless the broker's ACL denies
// the claim topic.
const claimWait = time.Second

// claimDenied is logged when a stream cannot see its claim.
const claimDenied = "mqtt: the session claim topic is not usable (an ACL?): a takeover of this session by another process will not be detected"

// watchState is what the publishing connection needs to watch the claims
// and to serve barrier.
type watchState struct {
	pingTopic string   // sessionTopicPrefix + "ping/" + the publisher ID
	pings     sync.Map // ping token -> chan struct{}, closed when it comes back
	mu        sync.Mutex
	ready     chan struct{} // closed once the connection watches every claim topic again
}

func (w *watchState) init(pubID string) {
	w.pingTopic = sessionTopicPrefix + "ping/" + pubID
	w.ready = make(chan struct{})
	close(w.ready) // nothing to watch yet
}

// lost marks the watch interrupted: the publishing connection was lost.
func (w *watchState) lost() {
	w.mu.Lock()
	select {
	case <-w.ready:
		w.ready = make(chan struct{})
	default:
	}
	w.mu.Unlock()
}

// restored marks the watch whole again.
func (w *watchState) restored() {
	w.mu.Lock()
	select {
	case <-w.ready:
	default:
		close(w.ready)
	}
	w.mu.Unlock()
}

func (w *watchState) readyCh() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready
}

// barrier returns once every claim the broker had sent the publishing
// connection before the call has been handled: it waits for the watch to
// be whole, then for a ping of its own to come back on the same
// connection, behind them. A stream calls it before it reconnects, so
// that a newer claim (published before the newer stream connected, which
// is what closed this stream's connection) is seen first.
func (t *Transport) barrier(ctx context.Context) error {
	if err := t.conn.wait(ctx, t.cfg.callTimeout); err != nil {
		return err
	}
	select {
	case <-t.watch.readyCh():
	case <-ctx.Done():
		return ctx.Err()
	}
	token := randomSuffix() + randomSuffix()
	back := make(chan struct{})
	t.watch.pings.Store(token, back)
	defer t.watch.pings.Delete(token)
	if err := t.send(ctx, t.watch.pingTopic, []byte(token), false); err != nil {
		return err
	}
	select {
	case <-back:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beforeDial is a stream connection's hook before each network
// connection: a reconnect first passes the barrier (bounded by the
// connect timeout; a broker that is down fails the dial anyway), and a
// stream taken over does not dial at all.
func (s *stream) beforeDial(first bool) error {
	if !first && !s.unwatched.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), s.t.cfg.connectTimeout)
		_ = s.t.barrier(ctx)
		cancel()
	}
	if s.takenOver.Load() {
		return s.takeErr
	}
	return nil
}

// claim watches s's claim topic on the publishing connection and publishes
// s's claim, before s connects. A claim topic the broker will not let the
// Transport use is logged and leaves takeover detection off for s.
func (t *Transport) claim(ctx context.Context, s *stream) error {
	t.claims.Store(s.own.topic, s)
	sctx, cancel := t.bound(ctx)
	refused, err := t.pub.subscribe(sctx, []string{s.own.topic, t.watch.pingTopic})
	cancel()
	if err != nil {
		t.claims.Delete(s.own.topic)
		return fmt.Errorf("watch the session claim: %w", err)
	}
	if refused[0] != nil || refused[1] != nil {
		s.unwatched.Store(true)
		s.log.Warn(claimDenied, "topic", s.own.topic, "reason", "the broker refused the subscription")
		return nil
	}
	if err := t.send(ctx, s.own.topic, s.own.payload, true); err != nil {
		if errors.Is(err, ErrNotAuthorized) { // MQTT 5 says so; 3.1.1 brokers drop it silently
			s.unwatched.Store(true)
			s.log.Warn(claimDenied, "topic", s.own.topic, "reason", err.Error())
			return nil
		}
		t.claims.Delete(s.own.topic)
		return fmt.Errorf("claim the session: %w", err)
	}
	timer := time.NewTimer(claimWait)
	defer timer.Stop()
	select {
	case <-s.ownSeen:
	case <-timer.C:
		s.unwatched.Store(true)
		s.log.Warn(claimDenied, "topic", s.own.topic, "reason", "the stream's own retained claim did not come back within "+claimWait.String())
	case <-ctx.Done():
		t.claims.Delete(s.own.topic)
		return ctx.Err()
	}
	return nil
}

// unclaim stops watching s's claim topic (s is closing), waiting at most
// wait: before s's client ID is released, so that a stream of t that
// takes the ID next subscribes after this unsubscribes.
func (t *Transport) unclaim(s *stream, wait time.Duration) {
	if !t.claims.CompareAndDelete(s.own.topic, s) || t.closed.Load() || !t.pub.up() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = t.pub.unsubscribe(ctx, []string{s.own.topic}) // best effort: a claim of a closed stream is ignored anyway
}

// rewatch subscribes the publishing connection again to the claim topics
// of the open streams, after it reconnected; the broker then sends each
// topic's retained claim, the latest. A failure is logged: those streams
// go without takeover detection until the next reconnect.
func (t *Transport) rewatch() {
	topics := []string{t.watch.pingTopic}
	t.claims.Range(func(k, _ any) bool {
		topics = append(topics, k.(string))
		return true
	})
	if len(topics) == 1 {
		t.watch.restored()
		return
	}
	go func() {
		defer t.watch.restored()
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.connectTimeout)
		defer cancel()
		if refused, err := t.pub.subscribe(ctx, topics); err != nil || errors.Join(refused...) != nil {
			if err == nil {
				err = errors.Join(refused...)
			}
			t.cfg.logger.Warn("mqtt: watching session claims again after a reconnect failed: a takeover will not be detected until the next reconnect", "err", err)
		}
	}()
}

// onClaimMessage is the publishing connection's message handler: a claim
// for one of t's streams, or one of its barrier's pings.
func (t *Transport) onClaimMessage(pm inbound) {
	if pm.Topic() == t.watch.pingTopic {
		if ch, ok := t.watch.pings.LoadAndDelete(string(pm.Payload())); ok {
			close(ch.(chan struct{}))
		}
		return
	}
	if v, ok := t.claims.Load(pm.Topic()); ok {
		v.(*stream).onClaim(pm.Payload(), pm.Duplicate())
	}
}

// clearClaim removes the retained claim of client ID id's session.
func (t *Transport) clearClaim(ctx context.Context, id string) error {
	if err := t.send(ctx, claimTopic(id), []byte{}, true); err != nil && !errors.Is(err, ErrNotAuthorized) {
		return fmt.Errorf("clear the session claim: %w", err)
	}
	return nil
}

// onClaim handles a claim that arrived on s's claim topic, from the
// publishing connection's goroutine.
func (s *stream) onClaim(payload []byte, dup bool) {
	var c claimDoc
	if len(payload) == 0 || json.Unmarshal(payload, &c) != nil || c.Claim == "" {
		return // cleared, or not a claim
	}
	if c.Claim == s.own.token {
		if !s.own.seenOwn {
			s.own.seenOwn = true
			close(s.ownSeen)
		}
		return
	}
	if dup || !s.own.seenOwn || s.takenOver.Load() {
		return // older than the own claim, or already handled
	}
	s.takeOver(fmt.Errorf("%w (claimed by host %q, pid %d, at %s)", ErrTakenOver, c.Host, c.PID, c.At),
		"claimed_by_host", c.Host, "claimed_by_pid", c.PID, "claimed_at", c.At)
}

// brokerTookOver is told, on MQTT 5, that the broker closed the
// connection because another connection took the session (DISCONNECT
// 0x8E): the same end as a newer claim, for a broker whose ACL hides the
// claims.
func (s *stream) brokerTookOver(reason error) {
	s.takeOver(fmt.Errorf("%w (%w)", ErrTakenOver, reason), "reason", reason.Error())
}

// takeOver stops s for good: it was taken over, as err says.
func (s *stream) takeOver(err error, attrs ...any) {
	s.takeMu.Lock()
	if s.takenOver.Load() {
		s.takeMu.Unlock()
		return
	}
	s.takeErr = err
	s.takenOver.Store(true)
	s.takeMu.Unlock()
	s.log.Error("mqtt: session taken over by another consumer with the same client ID; this stream stops and does not reconnect, so that the two do not take the session from each other. Give each process its own Subscription.Consumer, or stop the other one", attrs...)
	if s.client != nil {
		go s.client.disconnect(0)
	}
	s.wake()
}
