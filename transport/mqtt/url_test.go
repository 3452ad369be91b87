package mqtt_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

func TestURLErrors(t *testing.T) {
	ctx := context.Background()
	for url, want := range map[string]string{
		"mqtt://127.0.0.1:1883?bogus=1":                       "bogus",
		"mqtt://127.0.0.1:1883?keepalive=soon":                "keepalive",
		"mqtt://127.0.0.1:1883?keepalive=1s&keepalive=2s":     "more than once",
		"mqtt://127.0.0.1:1883?format=xml":                    "format",
		"mqtt://127.0.0.1:1883?key=level:x":                   "level",
		"mqtt://127.0.0.1:1883?id=sha1":                       "hash or json",
		"mqtt://127.0.0.1:1883?tls_key=/k.pem":                "tls_cert and tls_key go together",
		"mqtt://127.0.0.1:1883?tls_cert=/c.pem":               "tls_cert and tls_key go together",
		"mqtts://u:s3cret@127.0.0.1:8883?tls_ca=/nonexistent": "tls_ca",
		"mqtt://127.0.0.1:1883/path":                          "path",
		"mqtt://127.0.0.1:1883?max_payload=0":                 "MaxPayload",
		"mqtt://127.0.0.1:1883?retain=maybe":                  "retain",
		"mqtt://127.0.0.1:1883?client_id=":                    "ClientID",
		"mqtt://127.0.0.1:1883?dlq_prefix=dead":               "DLQPrefix",
		"mqtt://127.0.0.1:1883?connect_timeout=0s":            "ConnectTimeout",
		"mqtt://127.0.0.1:1883?reconnect_max=10ms":            "MaxReconnectInterval",
		"mqtt://:1883": "no host",
		"mqtt://u:s3cret@127.0.0.1:1883?token=s3cret&x=%zz": "escaped",
	} {
		_, err := transport.Open(ctx, url)
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v; want ErrInvalidOption mentioning %q", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s): error shows a secret: %v", url, err)
		}
		// New parses the same way, before connecting.
		if _, nerr := mqtt.New(ctx, url); nerr == nil || err == nil || !strings.HasSuffix(err.Error(), nerr.Error()) {
			t.Errorf("New(%s) = %v; Open = %v", url, nerr, err)
		}
	}
	if _, err := mqtt.New(ctx, "tcp://127.0.0.1:1883"); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("New(tcp://…) = %v; want ErrInvalidOption naming the scheme", err)
	}
	for name, opt := range map[string]mqtt.Option{
		"WithLogger(nil)":     mqtt.WithLogger(nil),
		"nil Option":          nil,
		"KeepAlive(0)":        mqtt.KeepAlive(0),
		"PayloadFormat(7)":    mqtt.PayloadFormat(7),
		"TLSConfig(nil)":      mqtt.TLSConfig(nil),
		"IDFrom(nil)":         mqtt.IDFrom(nil),
		"MaxPayload(-1)":      mqtt.MaxPayload(-1),
		"ClientCert(c, \"\")": mqtt.ClientCert("c.pem", ""),
	} {
		if _, err := mqtt.New(ctx, "mqtt://127.0.0.1:1", opt); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("New with %s = %v; want ErrInvalidOption", name, err)
		}
	}
}

func TestUnreachableBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := transport.Open(ctx, "mqtt://user:s3cret@127.0.0.1:1?connect_timeout=1s&allow_plaintext_auth=true")
	if !errors.Is(err, mqtt.ErrNotConnected) {
		t.Fatalf("Open of a closed port = %v; want ErrNotConnected", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

// TestOpenByURL publishes and receives through a Transport opened by URL
// with the envelope, a custom client ID and keepalive.
func TestOpenByURL(t *testing.T) {
	r := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, "mqtt://"+brokerAddr()+"?format=envelope&keepalive=5s&client_id=ferry-url-test-"+t.Name())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { r.add(tr.(*mqtt.Transport).Sessions()...); _ = tr.Close(ctx) }()
	topic := "ferry-test/url/" + time.Now().Format("150405.000000")
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: "ferry-url-test-sub-" + topic})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer st.Close(ctx)
	if err := tr.Publish(ctx, &handler.Message{ID: "e1", Key: "k", Topic: topic, Payload: []byte("x"), Headers: map[string]string{"h": "1"}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if m := d.Message(); m.ID != "e1" || m.Key != "k" || m.Headers["h"] != "1" {
		t.Errorf("got %+v", m)
	}
	_ = d.Ack(ctx)
}
