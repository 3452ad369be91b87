package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestDeclare: for every subscription shape the URL and the options allow,
// Declare(sub) says, without I/O, exactly what the stream Subscribe(sub)
// opens declares, and the ordering each shape promises.
func TestDeclare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	def := open(t)
	competing := openURL(t, withQuery(brokerURL(), "ordered=false"))
	sharded := openURL(t, withQuery(brokerURL(), "shards=4"))
	topic := transporttest.UniqueName(t, "declare")
	deleteLater(t, brokerURL(), []string{topic + ".bare"}, nil)
	cases := []struct {
		name     string
		tr       *rabbitmq.Transport
		group    string
		opts     map[string]string
		order    transport.Ordering
		hint     string // a part of OrderingHint; "" means none
		attempts bool
		shards   int
	}{
		{"default", def, "a", nil, transport.OrderPerTopic, "", true, 0},
		{"default/ordered=false", def, "b", map[string]string{rabbitmq.OptOrdered: "false"}, transport.OrderNone, "ordered=true", true, 0},
		{"default/classic", def, "c", map[string]string{rabbitmq.OptQueueType: rabbitmq.QueueClassic}, transport.OrderPerTopic, "", false, 0},
		{"competing", competing, "d", nil, transport.OrderNone, "shards=N", true, 0},
		{"competing/ordered=true", competing, "e", map[string]string{rabbitmq.OptOrdered: "true"}, transport.OrderPerTopic, "", true, 0},
		{"sharded", sharded, "f", nil, transport.OrderPerKey, "", true, 4},
		{"sharded/shard=1,3", sharded, "g", map[string]string{rabbitmq.OptShard: "1,3"}, transport.OrderPerKey, "", true, 4},
		{"passive DLQ", def, "", map[string]string{rabbitmq.OptQueue: rabbitmq.DLQName(topic + ".a"), rabbitmq.OptDeclare: "false"}, transport.OrderNone, "declare=false", true, 0},
		{"queue without topic", def, "", map[string]string{rabbitmq.OptQueue: topic + ".bare"}, transport.OrderPerTopic, "", true, 0},
	}
	parent := t // deletes at its end, so that the passive case finds the DLQ of the first
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := transport.Subscription{Topic: topic, Group: c.group, Options: c.opts}
			if c.opts[rabbitmq.OptQueue] != "" {
				sub.Topic = ""
			} else {
				cleanupSub(parent, brokerURL(), topic, c.group, c.shards)
			}
			want, err := c.tr.Declare(sub)
			if err != nil {
				t.Fatalf("Declare: %v", err)
			}
			st, err := c.tr.Subscribe(ctx, sub)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			defer st.Close(ctx)
			if got := st.Semantics(); !reflect.DeepEqual(got, want) {
				t.Errorf("Declare %+v\nstream  %+v", want, got)
			}
			if want.Ordering != c.order || want.Attempts != c.attempts {
				t.Errorf("declares ordering %s, attempts %t; want %s, %t", want.Ordering, want.Attempts, c.order, c.attempts)
			}
			if (c.hint == "") != (want.OrderingHint == "") || !strings.Contains(want.OrderingHint, c.hint) {
				t.Errorf("OrderingHint %q, want one naming %q", want.OrderingHint, c.hint)
			}
		})
	}
}

// TestURLOptions: each URL key is the same as its Option (a transport
// opened with ?shards=4 declares what one made with Shards(4) does), typed
// Options apply after the URL's, and every bad URL, key, value, Option or
// Subscription option is refused at once with an error wrapping
// transport.ErrInvalidOption that names it and never shows the password.
func TestURLOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := transport.Subscription{Topic: "orders", Group: "inventory"}
	declared := func(tr *rabbitmq.Transport) transport.Semantics {
		t.Helper()
		s, err := tr.Declare(sub)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b := declared(openURL(t, withQuery(brokerURL(), "shards=4"))), declared(open(t, rabbitmq.Shards(4))); !reflect.DeepEqual(a, b) {
		t.Errorf("?shards=4 declares %+v, Shards(4) %+v", a, b)
	}
	if s := declared(openURL(t, withQuery(brokerURL(), "ordered=false&queue_type=classic"), rabbitmq.Ordered(true))); s.Ordering != transport.OrderPerTopic || s.Attempts {
		t.Errorf("?ordered=false&queue_type=classic then Ordered(true): %+v; want per-topic order on a classic queue", s)
	}

	const pw = "s3cr3t"
	base := "amqp://guest:" + pw + "@127.0.0.1:5672/"
	bad := []struct {
		url  string
		opts []rabbitmq.Option
		want string // a part of the error
	}{
		{base + "?bogus=1", nil, "bogus"},
		{base + "?prefetch=10&prefetch=20", nil, "prefetch"},
		{base + "?delivery_limit=zero", nil, "delivery_limit"},
		{base + "?delivery_limit=0", nil, "DeliveryLimit"},
		{base + "?queue_type=stream", nil, "QueueType"},
		{base + "?prefetch=0", nil, "Prefetch"},
		{base + "?heartbeat=10", nil, "heartbeat"},
		{base + "?shards=0", nil, "Shards"},
		{base + "?shards=2&ordered=false", nil, "ordered=false"},
		{base + "?ordered=maybe", nil, "ordered"},
		{base + "?tls_insecure=true", nil, "amqps"},
		{base + "?reconnect_max=5s", nil, "reconnect_max"},
		{"http://guest:" + pw + "@127.0.0.1:5672/", nil, "scheme"},
		{"amqp://guest:" + pw + "@127.0.0.1:port/", nil, "URL"},
		{base, []rabbitmq.Option{nil}, "nil Option"},
		{base, []rabbitmq.Option{rabbitmq.WithLogger(nil)}, "WithLogger"},
		{base, []rabbitmq.Option{rabbitmq.TLS(nil)}, "TLS"},
		{base, []rabbitmq.Option{rabbitmq.Shards(3), rabbitmq.Ordered(false)}, "Ordered(false)"},
		{base, []rabbitmq.Option{rabbitmq.TopicShards("orders", 2), rabbitmq.Ordered(false)}, "TopicShards"},
		{base, []rabbitmq.Option{rabbitmq.Exchanges(rabbitmq.Exchange{Name: "orders", Kind: "x-delayed"})}, "Exchanges"},
	}
	for _, c := range bad {
		_, err := rabbitmq.New(ctx, c.url, c.opts...)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s): %v; want ErrInvalidOption naming %q", transport.RedactString(c.url), err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("New(%s): the error shows the password: %v", transport.RedactString(c.url), err)
		}
	}
	if _, err := transport.Open(ctx, base+"?bogus=1"); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("transport.Open with an unknown key: %v; want ErrInvalidOption", err)
	}
	requireRabbit(t)
	if _, err := rabbitmq.New(ctx, "amqp://guest:wr0ngpw@127.0.0.1:5672/"); err == nil || strings.Contains(err.Error(), "wr0ngpw") {
		t.Errorf("bad credentials: %v; want an error without the password", err)
	}

	tr := open(t, rabbitmq.WithLogger(slog.New(slog.DiscardHandler)))
	badSubs := []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"shards": "4"}, "shards"}, // a URL key, not a Subscription option
		{map[string]string{rabbitmq.OptPrefetch: "70000"}, "prefetch"},
		{map[string]string{rabbitmq.OptQueueType: "stream"}, "queue_type"},
		{map[string]string{rabbitmq.OptShard: "1"}, "shard"}, // no shards in the URL
		{map[string]string{rabbitmq.OptOrdered: "yes please"}, "ordered"},
	}
	for _, c := range badSubs {
		s := transport.Subscription{Topic: transporttest.UniqueName(t, "sub"), Group: "g", Options: c.opts}
		if _, err := tr.Declare(s); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Declare with %v: %v; want ErrInvalidOption naming %q", c.opts, err, c.want)
		}
		if _, err := tr.Subscribe(ctx, s); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Subscribe with %v: %v; want ErrInvalidOption", c.opts, err)
		}
	}
	shardedTr := openURL(t, withQuery(brokerURL(), "shards=2"))
	s := transport.Subscription{Topic: "orders", Group: "g", Options: map[string]string{rabbitmq.OptOrdered: "false"}}
	if _, err := shardedTr.Declare(s); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "shards=2") {
		t.Errorf("ordered=false on a sharded URL: %v; want ErrInvalidOption naming shards=2", err)
	}
}
