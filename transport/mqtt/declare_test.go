package mqtt_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestDeclareMatchesStream: for every subscription shape, Declare(sub)
// says what the stream Subscribe(sub) opens declares, and the DLQ that
// DLQName gives is where the stream dead-letters. A group is one session,
// kept in per-topic order; a shared subscription declares no order and
// names the option that keeps it.
func TestDeclareMatchesStream(t *testing.T) {
	r := shared(t)
	env, raw, env311 := r.open(t), r.open(t, mqtt.PayloadFormat(mqtt.Raw)), r.open(t, mqtt.Protocol(mqtt.MQTT311))
	topic := "ferry-test/" + transporttest.UniqueName(t, "declare") + "/+"
	g := transporttest.UniqueName(t, "g")
	for _, c := range []struct {
		name     string
		tr       *mqtt.Transport
		sub      transport.Subscription
		ordering transport.Ordering
		headers  bool
		dlq      string
	}{
		{"plain", env, transport.Subscription{Topic: topic}, transport.OrderPerTopic, true, ""},
		{"group", env, transport.Subscription{Topic: topic, Group: g}, transport.OrderPerTopic, true, mqtt.DLQTopic(g)},
		{"consumer", env, transport.Subscription{Topic: topic, Consumer: g + "-c"}, transport.OrderPerTopic, true, mqtt.DLQTopic(g + "-c")},
		{"share=false", env, transport.Subscription{Topic: topic, Group: g + "-f", Options: map[string]string{"share": "false"}}, transport.OrderPerTopic, true, mqtt.DLQTopic(g + "-f")},
		{"share=true", env, transport.Subscription{Topic: topic, Group: g + "-s", Options: map[string]string{"share": "true"}}, transport.OrderNone, true, mqtt.DLQTopic(g + "-s")},
		{"dlq option", env, transport.Subscription{Topic: topic, Group: g + "-d", Options: map[string]string{"dlq": "dead/" + g + ".dlq"}}, transport.OrderPerTopic, true, "dead/" + g + ".dlq"},
		{"raw", raw, transport.Subscription{Topic: topic, Group: g + "-r"}, transport.OrderPerTopic, false, mqtt.DLQTopic(g + "-r")},
		{"3.1.1", env311, transport.Subscription{Topic: topic, Group: g + "-3"}, transport.OrderPerTopic, true, mqtt.DLQTopic(g + "-3")},
		{"3.1.1 share=true", env311, transport.Subscription{Topic: topic, Group: g + "-3s", Options: map[string]string{"share": "true"}}, transport.OrderNone, true, mqtt.DLQTopic(g + "-3s")},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.tr.Declare(c.sub)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := c.tr.Subscribe(ctx, c.sub)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close(ctx)
			if got := st.Semantics(); got != want {
				t.Errorf("Declare = %+v\nstream  = %+v", want, got)
			}
			if want.Ordering != c.ordering || want.Headers != c.headers {
				t.Errorf("Ordering %v Headers %v; want %v %v", want.Ordering, want.Headers, c.ordering, c.headers)
			}
			if (want.Ordering == transport.OrderNone) != (want.OrderingHint != "") {
				t.Errorf("OrderingHint %q with Ordering %v", want.OrderingHint, want.Ordering)
			}
			if c.dlq != "" && transport.DLQName(c.tr, c.sub) != c.dlq {
				t.Errorf("DLQName = %q, want %q", transport.DLQName(c.tr, c.sub), c.dlq)
			}
		})
	}
}

// TestDeclareRefuses: what Subscribe would refuse, Declare refuses without
// I/O, with ErrInvalidOption.
func TestDeclareRefuses(t *testing.T) {
	r := shared(t)
	tr := r.open(t)
	for name, sub := range map[string]transport.Subscription{
		"unknown option":     {Topic: "a", Options: map[string]string{"shards": "4"}},
		"bad share":          {Topic: "a", Group: "g", Options: map[string]string{"share": "maybe"}},
		"share, no group":    {Topic: "a", Options: map[string]string{"share": "true"}},
		"share, group slash": {Topic: "a", Group: "g/h", Options: map[string]string{"share": "true"}},
		"empty topic":        {Topic: ""},
		"bad filter":         {Topic: "a/#/b"},
		"claims topic":       {Topic: "ferry/session/#"},
		"group wildcard":     {Topic: "a", Group: "g+"},
		"empty dlq":          {Topic: "a", Options: map[string]string{"dlq": ""}},
		"dlq not a DLQ":      {Topic: "a", Options: map[string]string{"dlq": "dead/letters"}},
	} {
		_, err := tr.Declare(sub)
		if !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("%s: Declare = %v; want ErrInvalidOption", name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, serr := tr.Subscribe(ctx, sub)
		cancel()
		if !errors.Is(serr, transport.ErrInvalidOption) {
			t.Errorf("%s: Subscribe = %v; want ErrInvalidOption", name, serr)
		}
	}
}

// TestRouterRefusesOrderOnShared: the Router refuses, at Add, per-key
// order on a shared subscription, quoting the option that keeps order; on
// the default subscription it accepts it.
func TestRouterRefusesOrderOnShared(t *testing.T) {
	r := shared(t)
	tr := r.open(t)
	h := handler.HandlerFunc(func(context.Context, *handler.Message) error { return nil })
	rt, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: "ferry-test/shared-order", Options: map[string]string{mqtt.OptionShare: "true"}}
	err = rt.Add("shared", tr, sub, h, ferry.PerKey())
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "share=false") {
		t.Errorf("Add(PerKey) on share=true = %v; want ErrInvalidOption quoting share=false", err)
	}
	sub.Options = nil
	if err := rt.Add("default", tr, sub, h, ferry.PerKey()); err != nil {
		t.Errorf("Add(PerKey) on the default subscription: %v", err)
	}
}
