package mqtt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Session takeover. Two live connections with one client ID take the
// session from each other: the broker closes the older one, and a client
// that reconnects takes it back, for ever. MQTT 3.1.1 gives the closed
// connection no reason, so each stream claims its session instead:
//
//   - Before connecting, Subscribe publishes a claim, a random token,
//     retained on the session's claim topic, ferry/session/<hash of the
//     client ID>, through the Transport's publishing connection.
//   - Every connection of the stream subscribes to that topic. A stream
//     holding the session receives the claim of a newer stream before the
//     broker closes its connection (the claim is published first), and a
//     stream that reconnects receives the retained claim, which is its own
//     unless a newer stream has claimed since.
//   - A foreign claim that is retained, or that arrives live after the
//     stream's own claim, is newer: the stream has been taken over. (A
//     redelivered claim, flagged DUP, is not evidence: it was acted on when
//     it first came, and each subscription brings the retained one
//     afresh.) It logs it once at level Error, disconnects without
//     reconnecting, and Receive, Ack and Nack return ErrTakenOver. A
//     foreign claim that arrives live before the stream's own is an older
//     one still queued in the session, and is ignored.
//
// So the newer stream keeps the session and the older one stops and says
// why. If the older one misses the live claim (it was disconnected at that
// moment), it reconnects once, which closes the newer one's connection
// once (that one reconnects, and redelivery brings back what it had not
// acked), and then stops.

// sessionClaim is a stream's claim on its persistent session.
type sessionClaim struct {
	topic   string // sessionTopicPrefix + hash of the client ID
	token   string // this stream's, random
	payload []byte // the claim document
	seenOwn bool   // the own claim arrived; arrive's goroutine only
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

// awaitClaim waits, after the first subscription, for s's own claim to
// come back, and warns if it does not.
func (s *stream) awaitClaim(ctx context.Context) error {
	t := time.NewTimer(claimWait)
	defer t.Stop()
	select {
	case <-s.ownSeen:
	case <-t.C:
		s.log.Warn(claimDenied, "topic", s.own.topic, "reason", "the stream's own retained claim did not come back within "+claimWait.String())
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// claim publishes s's claim, retained, before s connects.
func (t *Transport) claim(ctx context.Context, s *stream) error {
	if err := t.send(ctx, s.own.topic, s.own.payload, true); err != nil {
		return fmt.Errorf("claim the session: %w", err)
	}
	return nil
}

// clearClaim removes the retained claim of client ID id's session.
func (t *Transport) clearClaim(ctx context.Context, id string) error {
	if err := t.send(ctx, claimTopic(id), []byte{}, true); err != nil {
		return fmt.Errorf("clear the session claim: %w", err)
	}
	return nil
}

// onClaim handles a claim that arrived on s's claim topic (from arrive's
// goroutine).
func (s *stream) onClaim(payload []byte, retained, dup bool) {
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
	if dup || (!retained && !s.own.seenOwn) {
		// A claim redelivered after a reconnect (what it says was acted on
		// when it first came, or else the subscription on every connect
		// sees the retained one afresh), or an older claim still queued in
		// the session.
		return
	}
	if s.takenOver.Load() {
		return
	}
	s.takeErr = fmt.Errorf("%w (claimed by host %q, pid %d, at %s)", ErrTakenOver, c.Host, c.PID, c.At)
	s.takenOver.Store(true)
	s.log.Error("mqtt: session taken over by another consumer with the same client ID; this stream stops and does not reconnect, so that the two do not take the session from each other. Give each process its own Subscription.Consumer, or stop the other one",
		"claimed_by_host", c.Host, "claimed_by_pid", c.PID, "claimed_at", c.At)
	go s.client.disconnect(0)
	s.wake()
}
