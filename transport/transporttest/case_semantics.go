package transporttest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// unknownOption is a Subscription.Options key no transport knows.
const unknownOption = "transporttest_unknown_option"

// checkDeclare fails t if conn, a [transport.Declarer], declares for sub
// anything other than what the stream opened with sub declared. Every
// stream the suite opens is checked, so every subscription shape a harness
// makes (a lease, a DLQ, a queue type) is.
func (s *suite) checkDeclare(t testing.TB, conn transport.Subscriber, sub transport.Subscription, opened transport.Semantics) {
	t.Helper()
	d, ok := conn.(transport.Declarer)
	if !ok {
		return // the Declare case fails for it
	}
	declared, err := d.Declare(sub)
	switch {
	case err != nil:
		t.Errorf("Declare(topic %q, group %q, options %v) = %v, but Subscribe accepted it", sub.Topic, sub.Group, sub.Options, err)
	case declared != opened:
		t.Errorf("Declare(topic %q, group %q, options %v) differs from what the stream Subscribe opened declares:\nDeclare:  %s\nSemantics: %s",
			sub.Topic, sub.Group, sub.Options, describe(declared), describe(opened))
	}
}

// testDeclare proves that the transport is a [transport.Declarer] (every
// Ferry transport is: the Router checks an ordering request at Add with
// it), that what it declares for a subscription is what the stream
// declares (checked on every stream the suite opens), and that Declare and
// Subscribe both refuse an unknown Subscription.Options key with an error
// wrapping transport.ErrInvalidOption that names it.
func (s *suite) testDeclare(t *testing.T) {
	conn := s.open(t)
	d, ok := conn.(transport.Declarer)
	if !ok {
		t.Fatalf("the transport (%T) is not a transport.Declarer: Declare(sub) must say what Subscribe(sub) would declare", conn)
	}
	topic := s.topic(t, "declare")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	s.subscribe(t, conn, sub) // checkDeclare compares the two

	bad := sub
	bad.Options = make(map[string]string, len(sub.Options)+1)
	for k, v := range sub.Options {
		bad.Options[k] = v
	}
	bad.Options[unknownOption] = "1"
	if _, err := d.Declare(bad); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), unknownOption) {
		t.Errorf("Declare with the unknown option %q = %v; want an error wrapping transport.ErrInvalidOption that names it", unknownOption, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	st, err := conn.Subscribe(ctx, bad)
	if err == nil {
		closeStream(t, st)
	}
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(fmtErr(err), unknownOption) {
		t.Errorf("Subscribe with the unknown option %q = %v; want an error wrapping transport.ErrInvalidOption that names it", unknownOption, err)
	}
}

// fmtErr is err's text, or "" for nil.
func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// testOrderingHint proves Semantics.OrderingHint. A stream that keeps order
// declares no hint. A stream that keeps none declares one, naming the
// configuration that would keep order (or, for a broker that keeps order
// in no configuration, saying so), and the Router quotes it when it
// refuses per-key order on the stream at Add.
//
// OrderNone with an empty hint fails: every broker Ferry supports keeps
// order in some configuration, and a user refused per-key order must learn
// which.
func (s *suite) testOrderingHint(t *testing.T) {
	conn := s.open(t)
	topic := s.topic(t, "hint")
	sub := s.sub(t, topic, UniqueName(t, "g"))
	sem := s.peek(t, conn, sub)
	if sem.Ordering.Keeps() {
		if sem.OrderingHint != "" {
			t.Errorf("Semantics.OrderingHint is %q while Ordering is %v: the hint is for streams that keep no order", sem.OrderingHint, sem.Ordering)
			return
		}
		s.cov.exercise("OrderingHint")
		return
	}
	if sem.OrderingHint == "" {
		t.Errorf("Semantics.Ordering is none and OrderingHint is empty: name the configuration that keeps order (or, if the broker keeps none in any configuration, say so in the hint), so that the Router's refusal of per-key order tells the user what to do")
		return
	}
	r := newRouter(t)
	err := r.Add("ordered", conn, sub, handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil }), ferry.PerKey())
	switch {
	case err == nil:
		t.Errorf("Router.Add with ferry.PerKey on a stream that declares Ordering none succeeded; want a refusal quoting OrderingHint %q", sem.OrderingHint)
	case !strings.Contains(err.Error(), sem.OrderingHint):
		t.Errorf("Router.Add with ferry.PerKey on a stream that declares Ordering none = %v; want it to quote OrderingHint %q", err, sem.OrderingHint)
	default:
		s.cov.exercise("OrderingHint")
	}
}
