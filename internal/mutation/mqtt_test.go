package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// mosquitto needs the mosquitto program, which the MQTT tests run as
// private brokers, and the shared broker some of them use.
func mosquitto(tb testing.TB) { transporttest.RequireBroker(tb, "mosquitto", "127.0.0.1:1883") }

// The MQTT transport's mutants (issue 18) and the store-and-forward
// buffer's, each with the test that kills it.
func init() {
	register("mqtt", []Mutant{
		{
			Name: "ack-at-receive", // a PUBACK leaves as the message arrives, before the handler
			Pkg:  "./transport/mqtt", File: "transport/mqtt/stream.go",
			Find: `	if control {
		d.settled.Store(true)
		d.q.ack(d)
		return
	}
	s.wake()`,
			Replace: `	d.q.ack(d)
	if control {
		d.settled.Store(true)
		return
	}
	s.wake()`,
			Run:      "^TestConformance$/^Redelivery$/^OnReconnect$",
			Want:     "Redelivery/OnReconnect",
			Requires: mosquitto,
		},
		{
			Name: "ack-all", // one Ack sends the PUBACKs of every message received so far
			Pkg:  "./transport/mqtt", File: "transport/mqtt/ack.go",
			Find:     `	for q.head < len(q.items) && q.items[q.head].acked {`,
			Replace:  `	for q.head < len(q.items) {`,
			Run:      "^TestConformance$/^Ack$",
			Want:     "--- FAIL: TestConformance/Ack",
			Requires: mosquitto,
		},
		{
			Name: "ack-out-of-order", // a PUBACK leaves at its Ack, before those of earlier messages
			Pkg:  "./transport/mqtt", File: "transport/mqtt/ack.go",
			Find: `	d.acked = true
	due := q.due[:0]`,
			Replace: `	d.acked = true
	q.mu.Unlock()
	q.send([]inbound{d.pm})
	q.mu.Lock()
	due := q.due[:0]`,
			Run:      "^TestPubacksInArrivalOrder$",
			Want:     "PUBACKs sent before the first message was acked",
			Requires: mosquitto,
		},
		{
			Name: "drop-user-properties", // headers are not sent as MQTT 5 user properties
			Pkg:  "./transport/mqtt", File: "transport/mqtt/props.go",
			Find: `		default:
			p.User = append(p.User, paho5.UserProperty{Key: k, Value: v})
		}`,
			Replace: `		default:
		}`,
			Run:      "^TestConformance$/^Headers$",
			Want:     "--- FAIL: TestConformance/Headers",
			Requires: mosquitto,
		},
		{
			Name: "dup-not-counted", // a redelivery flagged DUP is attempt 1
			Pkg:  "./transport/mqtt", File: "transport/mqtt/stream.go",
			Find:     `		attempt = 2 // at least: the broker sent it before, on an earlier connection`,
			Replace:  `		attempt = 1`,
			Run:      "^TestAckAfterReconnectIsRevoked$/^mqtt5$",
			Want:     "want m1, attempt 2",
			Requires: mosquitto,
		},
		{
			Name: "confirm-at-send", // an MQTT 5 publish is confirmed once written, without the broker's PUBACK
			Pkg:  "./transport/mqtt", File: "transport/mqtt/session5.go",
			Find: `		tok.stored.Store(true)
		released := s.released[1]`,
			Replace: `		tok.stored.Store(true)
		tok.complete(nil)
		released := s.released[1]`,
			Run:      "^TestPublishNotAuthorized$",
			Want:     "want ErrNotAuthorized",
			Requires: mosquitto,
		},
		{
			Name: "ignore-session-taken-over", // a DISCONNECT with reason code 0x8E does not stop the stream
			Pkg:  "./transport/mqtt", File: "transport/mqtt/session5.go",
			Find:     `	if dp != nil && s.disconnected != nil {`,
			Replace:  `	if false {`,
			Run:      "^TestTakenOverByReasonCode$",
			Want:     "want ErrTakenOver",
			Requires: mosquitto,
		},
		{
			Name: "plaintext-credentials", // credentials are sent over plain TCP without allow_plaintext_auth
			Pkg:  "./transport/mqtt", File: "transport/mqtt/url.go",
			Find:     `	if server == "tcp://" && (cfg.username != "" || cfg.password != "") && !cfg.plaintextAuth {`,
			Replace:  `	if false {`,
			Run:      "^TestTLSAndPassword$",
			Want:     "credentials over plain TCP",
			Requires: mosquitto,
		},
	})
	register("forward", []Mutant{
		{
			Name: "remove-unconfirmed", // the forwarder removes a message the upstream did not confirm
			Pkg:  "./forward", File: "forward/forward.go",
			Find: `			default:
				failed = e
			}`,
			Replace: `			default:
			}`,
			Run:  "^TestForwardsInOrderAcrossAnOutage$",
			Want: "want 300 pending",
		},
		{
			Name: "ack-before-sync", // Publish returns before its transaction is committed
			Pkg:  "./forward", File: "forward/buffer.go",
			Find: `	<-req.done // a commit cannot be abandoned half way`,
			Replace: `	select { // returns before the commit
	case <-req.done:
	default:
	}`,
			Run:  "^TestKill9LosesNothing$",
			Want: "forwarded after the kill",
		},
		{
			Name: "no-dedupe", // a message given twice is buffered twice
			Pkg:  "./forward", File: "forward/buffer.go",
			Find:    `				if b.cfg.dedupe > 0 && ids.Get([]byte(req.id)) != nil {`,
			Replace: `				if false {`,
			Run:     "^TestDedupe$",
			Want:    "forwarded [r-0 r-0",
		},
	})
}
