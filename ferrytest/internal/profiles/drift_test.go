package profiles_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/ferrytest/internal/profiles"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/jetstream"
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/memory"
	_ "github.com/ferrymq/ferry/transport/mqtt"
	_ "github.com/ferrymq/ferry/transport/rabbitmq"
	_ "github.com/ferrymq/ferry/transport/redisstream"
	_ "github.com/ferrymq/ferry/transport/sns"
	_ "github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// brokerAddr returns the address that stands for "BROKER" in a row's URL,
// or skips t (fails it under FERRY_REQUIRE_BROKERS=1) when the broker is
// unreachable: the transports whose New connects need one. Kafka is
// kfake, in process; SQS's New does no I/O.
func brokerAddr(t *testing.T, scheme string) string {
	switch scheme {
	case "memory":
		return ""
	case "nats":
		transporttest.RequireBroker(t, "nats", "127.0.0.1:4222")
		return "127.0.0.1:4222"
	case "kafka":
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()[0]
	case "sqs":
		return "127.0.0.1:1"
	case "amqp":
		transporttest.RequireBroker(t, "rabbitmq", "127.0.0.1:5672")
		return "127.0.0.1:5672"
	case "redis":
		transporttest.RequireBroker(t, "redis", "127.0.0.1:6379")
		return "127.0.0.1:6379"
	case "mqtt":
		transporttest.RequireBroker(t, "mosquitto", "127.0.0.1:1883")
		return "127.0.0.1:1883"
	}
	t.Fatalf("no test broker for scheme %q", scheme)
	return ""
}

// rowURL is the row's URL with the test broker filled in. SQS's URL names
// no host: its queue comes from the subscription, its endpoint from a key.
func rowURL(e profiles.Entry, addr string) string {
	if strings.HasPrefix(e.URL, "sqs://") {
		return "sqs://" + e.Sub.Topic + "?region=us-east-1&allow_plaintext_auth=true&endpoint=http://" + addr
	}
	return strings.Replace(e.URL, "BROKER", addr, 1)
}

// declared returns what the real transport declares for the row, by its
// Declare (every transport of this module implements transport.Declarer).
func declared(t *testing.T, e profiles.Entry) transport.Semantics {
	scheme := strings.SplitN(e.URL, "://", 2)[0]
	addr := brokerAddr(t, scheme)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if scheme == "sqs" {
		// The SDK's credential chain must find some; Declare sends nothing.
		t.Setenv("AWS_ACCESS_KEY_ID", "test")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	}
	tr, err := transport.Open(ctx, rowURL(e, addr))
	if err != nil {
		t.Fatalf("open the URL of %s: %v", e.Name, err)
	}
	defer tr.Close(context.Background())
	d, ok := tr.(transport.Declarer)
	if !ok {
		t.Fatalf("the %s transport does not implement transport.Declarer", scheme)
	}
	sem, err := d.Declare(e.Sub)
	if err != nil {
		t.Fatalf("Declare(%+v): %v", e.Sub, err)
	}
	return sem
}

// TestTableMatchesTransports: every row is what its transport declares,
// field by field, for the row's subscription and for one with the
// options that select the row.
func TestTableMatchesTransports(t *testing.T) {
	for _, e := range profiles.Table {
		t.Run(e.Name, func(t *testing.T) {
			compare(t, e, declared(t, e))
			if len(e.Select) > 0 {
				sel := e
				sel.Sub.Options = e.Select
				compare(t, e, declared(t, sel))
			}
		})
	}
}

// compare fails t, naming the fields, if got is not e's Semantics.
func compare(t *testing.T, e profiles.Entry, got transport.Semantics) {
	t.Helper()
	if got == e.Semantics {
		return
	}
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(e.Semantics)
	var diffs []string
	for i := range gv.NumField() {
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); g != w {
			diffs = append(diffs, fmt.Sprintf("%s: transport declares %v, the table says %v", gv.Type().Field(i).Name, g, w))
		}
	}
	t.Errorf("profile %q drifted from its transport (update ferrytest/internal/profiles):\n  %s\n  declared: %#v",
		e.Name, strings.Join(diffs, "\n  "), got)
}

// TestEverySchemeHasAProfile: a transport registered in this module has a
// row that FromURL finds by its scheme.
func TestEverySchemeHasAProfile(t *testing.T) {
	for _, scheme := range transport.Schemes() {
		p := ferrytest.FromURL(scheme + "://x")
		if err := p.Err(); err != nil {
			t.Errorf("scheme %q: %v", scheme, err)
		}
	}
}

// TestFromURLFindsTheRow: each row that is a scheme's default is what
// FromURL returns for its URL, and each row with options that select it
// is what every profile of its transport gives a subscription with them.
func TestFromURLFindsTheRow(t *testing.T) {
	for _, e := range profiles.Table {
		if len(e.Select) > 0 {
			for _, o := range profiles.Table {
				if o.Semantics.Transport != e.Semantics.Transport {
					continue
				}
				sub := transport.Subscription{Topic: "orders", Options: e.Select}
				if got := ferrytest.Like(o.Name).For(sub); got.Name != e.Name || got.Semantics != e.Semantics {
					t.Errorf("Like(%q).For(%v) = %q, want %q", o.Name, e.Select, got.Name, e.Name)
				}
			}
		}
		if len(e.Schemes) == 0 {
			continue
		}
		p := ferrytest.FromURL(rowURL(e, "127.0.0.1:1"))
		if p.Err() != nil || p.Name != e.Name || p.Semantics != e.Semantics {
			t.Errorf("FromURL(the URL of %s) = %q (%v), want %q", e.Name, p.Name, p.Err(), e.Name)
		}
	}
}
