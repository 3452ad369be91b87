package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/kafka"
)

// TestURL opens a Transport from a URL naming two brokers and setting
// keys, and checks their effect: the default group and start position
// (a message published before the group exists is received), the payload
// limit, and the Semantics the timeouts give.
func TestURL(t *testing.T) {
	addrs := newCluster(t, 2, kfake.NumBrokers(2))
	if len(addrs) != 2 {
		t.Fatalf("kfake listens on %v, want two brokers", addrs)
	}
	createTopic(t, addrs, "url", 2)
	u := brokerURL(addrs) + "?group=g-url&start=earliest&session_timeout=1s&heartbeat=100ms&commit_interval=100ms" +
		"&window=7&client_id=url-test&partitioner=murmur2&compression=none&linger=0s&delivery_timeout=5s" +
		"&max_payload=2048&balance=roundrobin&revoke_timeout=1s&version=3.6.0"
	opened, err := transport.Open(ctxT(t, 10*time.Second), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	tr := opened.(*kafka.Transport)
	t.Cleanup(func() { _ = tr.Close(ctxT(t, 10*time.Second)) })

	err = tr.Publish(ctxT(t, 5*time.Second), &handler.Message{Topic: "url", Payload: make([]byte, 2049)})
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("a 2049-byte payload with max_payload=2048: %v, want ErrTooLarge", err)
	}
	publishAll(t, tr, []*handler.Message{{ID: "before", Key: "k", Topic: "url", Payload: make([]byte, 2048)}})

	sub := transport.Subscription{Topic: "url"} // the group comes from the URL
	if got := transport.DLQName(tr, sub); got != "g-url.dlq" {
		t.Errorf("DLQName = %q, want g-url.dlq (the URL's group)", got)
	}
	sem, err := tr.Declare(sub)
	if err != nil {
		t.Fatal(err)
	}
	if sem.MaxPayload != 2048 || sem.RedeliveryDelay != 1100*time.Millisecond || sem.Ordering != transport.OrderPerKey {
		t.Errorf("Declare = %+v; want MaxPayload 2048, RedeliveryDelay 1.1s, per-key order", sem)
	}
	st := subscribe(t, tr, sub)
	if st.Semantics() != sem {
		t.Errorf("stream Semantics %+v, Declare %+v", st.Semantics(), sem)
	}
	if m := receive(t, st, 1)[0]; m.ID != "before" {
		t.Errorf("received %q; want the message published before the group existed (start=earliest)", m.ID)
	}
}

// TestURLErrors: every malformed URL, key or option is refused by New,
// before any connection, with an error wrapping ErrInvalidOption that
// names what is wrong and never shows the password.
func TestURLErrors(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	for _, c := range []struct {
		url  string
		opts []kafka.Option
		want string // in the error
	}{
		{url: "kafka://127.0.0.1:1?group=a&group=b", want: `"group" given more than once`},
		{url: "kafka://127.0.0.1:1?bogus=1&group=a", want: "unknown option(s) bogus"},
		{url: "kafka://127.0.0.1:1?window=x", want: `"window": want an integer`},
		{url: "kafka://127.0.0.1:1?linger=fast", want: `"linger": want a duration`},
		{url: "kafka://127.0.0.1:1?tls=maybe", want: `"tls": want true or false`},
		{url: "kafka://127.0.0.1:1?partitioner=crc32", want: `Partitioner("crc32")`},
		{url: "kafka://127.0.0.1:1?window=0", want: "PartitionWindow(0)"},
		{url: "kafka://127.0.0.1:1?heartbeat=5s", want: "a third of SessionTimeout"},
		{url: "kafka://127.0.0.1:1?sasl=plain", want: `"sasl": needs a user and password`},
		{url: "kafka://carol:secret-pw-9@127.0.0.1:1?sasl=gssapi", want: `SASL mechanism "GSSAPI"`},
		{url: "kafka://carol:secret-pw-9@127.0.0.1:1?nope=secret-pw-9", want: "unknown option(s) nope"},
		{url: "kafka://127.0.0.1:1?tls_cert=a.pem", want: "tls_cert and tls_key go together"},
		{url: "kafka://", want: "names no broker"},
		{url: "kafka://127.0.0.1:1/orders", want: `unexpected path "/orders"`},
		{url: "redis://127.0.0.1:1", want: `scheme "redis" is not "kafka"`},
		{url: "kafka://127.0.0.1:1", opts: []kafka.Option{nil}, want: "nil Option"},
		{url: "kafka://127.0.0.1:1", opts: []kafka.Option{kafka.WithLogger(nil)}, want: "WithLogger(nil)"},
		{url: "kafka://127.0.0.1:1?window=5", opts: []kafka.Option{kafka.PartitionWindow(-1)}, want: "PartitionWindow(-1)"},
	} {
		_, err := kafka.New(ctx, c.url, c.opts...)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q): %v; want ErrInvalidOption naming %s", transport.RedactString(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-pw-9") {
			t.Errorf("New(%q): the error shows the password: %v", transport.RedactString(c.url), err)
		}
	}
}

// TestDeclare: Declare(sub) equals the Semantics of the stream that
// Subscribe(sub) opens, for every shape of subscription the transport
// takes, and refuses, as Subscribe does, what Subscribe refuses.
func TestDeclare(t *testing.T) {
	addrs := newCluster(t, 2)
	createTopic(t, addrs, "decl", 2)
	tr := open(t, addrs, kafka.Group("default-group"), kafka.MaxPayload(4096))
	for name, sub := range map[string]transport.Subscription{
		"group":         {Topic: "decl", Group: "g1"},
		"default group": {Topic: "decl"},
		"oldest":        {Topic: "decl", Group: "g2", StartAtOldest: true, MaxInFlight: 10},
		"options":       {Topic: "decl", Group: "g3", Consumer: "member-1", Options: map[string]string{"start": "earliest", "window": "5", "balance": "range"}},
	} {
		t.Run(name, func(t *testing.T) {
			sem, err := tr.Declare(sub)
			if err != nil {
				t.Fatal(err)
			}
			if sem.MaxPayload != 4096 {
				t.Errorf("Declare MaxPayload %d, want 4096", sem.MaxPayload)
			}
			st := subscribe(t, tr, sub)
			if st.Semantics() != sem {
				t.Errorf("stream Semantics %+v, Declare %+v", st.Semantics(), sem)
			}
		})
	}
	bare := open(t, addrs) // no default group
	for name, c := range map[string]struct {
		tr   *kafka.Transport
		sub  transport.Subscription
		want string
	}{
		"unknown option": {tr, transport.Subscription{Topic: "decl", Group: "g", Options: map[string]string{"bogus": "1"}}, "unknown option(s) bogus"},
		"bad window":     {tr, transport.Subscription{Topic: "decl", Group: "g", Options: map[string]string{"window": "0"}}, "PartitionWindow(0)"},
		"window text":    {tr, transport.Subscription{Topic: "decl", Group: "g", Options: map[string]string{"window": "many"}}, `"window": want an integer`},
		"bad start":      {tr, transport.Subscription{Topic: "decl", Group: "g", Options: map[string]string{"start": "middle"}}, `StartAt("middle")`},
		"no topic":       {tr, transport.Subscription{Group: "g"}, "no Topic"},
		"no group":       {bare, transport.Subscription{Topic: "decl"}, "no Group"},
	} {
		_, err := c.tr.Declare(c.sub)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Declare: %v; want ErrInvalidOption naming %s", name, err, c.want)
		}
		if _, err := c.tr.Subscribe(ctxT(t, 5*time.Second), c.sub); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("%s: Subscribe: %v; want ErrInvalidOption as Declare", name, err)
		}
	}
}
