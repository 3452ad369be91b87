package mqtt_test

import (
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestInteropUserPropertiesIn: messages that mosquitto_pub -V mqttv5
// publishes with user properties reach a Ferry consumer on the default
// URL with those properties as headers: ferry-id and ferry-key give the
// Message's ID and Key, content type, correlation data, response topic,
// message expiry and payload format appear under their header names; a
// message without ferry-id (a device) gets the content hash as ID and the
// topic as Key.
func TestInteropUserPropertiesIn(t *testing.T) {
	r := shared(t)
	pubBin := requireBinary(t, "mosquitto_pub")
	tr := r.open(t)
	topic := "ferry-test/" + transporttest.UniqueName(t, "up-in")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Consumer: transporttest.UniqueName(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	pub := func(payload string, props ...string) {
		t.Helper()
		args := []string{"-V", "mqttv5", "-h", "127.0.0.1", "-p", port(), "-q", "1", "-t", topic, "-m", payload}
		for i := 0; i < len(props); i += 2 {
			if strings.HasPrefix(props[i], "user:") {
				args = append(args, "-D", "publish", "user-property", props[i][len("user:"):], props[i+1])
			} else {
				args = append(args, "-D", "publish", props[i], props[i+1])
			}
		}
		if out, err := exec.Command(pubBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub: %v: %s", err, out)
		}
	}
	pub(`{"order":42}`, "user:ferry-id", "evt-1", "user:ferry-key", "order-42", "user:trace", "t1", "user:k", "v",
		"content-type", "application/json", "correlation-data", "req-7", "response-topic", "replies/7",
		"message-expiry-interval", "3600", "payload-format-indicator", "1")
	pub(`{"celsius":21.5}`, "user:k", "v")

	d, err := st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Message()
	want := map[string]string{"trace": "t1", "k": "v", "content-type": "application/json", "correlation-id": "req-7",
		"reply-to": "replies/7", "mqtt-payload-format": "utf-8"}
	exp := m.Headers[mqtt.HeaderMessageExpiry]
	delete(m.Headers, mqtt.HeaderMessageExpiry)
	if m.ID != "evt-1" || m.Key != "order-42" || string(m.Payload) != `{"order":42}` || !maps.Equal(m.Headers, want) {
		t.Errorf("got ID %q Key %q payload %q headers %v; want evt-1, order-42, the payload, %v", m.ID, m.Key, m.Payload, m.Headers, want)
	}
	if exp != "3600" && exp != "3599" {
		t.Errorf("remaining expiry %q; want 3600 or 3599 (seconds left of 3600)", exp)
	}
	_ = d.Ack(ctx)

	d, err = st.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m = d.Message()
	if m.ID != mqtt.ContentHash(topic, []byte(`{"celsius":21.5}`)) || m.Key != topic || !maps.Equal(m.Headers, map[string]string{"k": "v"}) {
		t.Errorf("a device's message: ID %q Key %q headers %v; want the content hash, the topic, k=v", m.ID, m.Key, m.Headers)
	}
	_ = d.Ack(ctx)
}

// TestInteropUserPropertiesOut: what Ferry publishes on the default URL,
// mosquitto_sub -V mqttv5 receives: the payload byte for byte, ID, Key and
// headers as user properties, the property headers as their properties.
func TestInteropUserPropertiesOut(t *testing.T) {
	r := shared(t)
	subBin := requireBinary(t, "mosquitto_sub")
	topic := "ferry-test/" + transporttest.UniqueName(t, "up-out")
	id := transporttest.UniqueName(t, "msub")
	r.add(id)
	args := []string{"-V", "mqttv5", "-h", "127.0.0.1", "-p", port(), "-q", "1", "-c", "-x", "600", "-i", id, "-t", topic}
	if out, err := exec.Command(subBin, append(args, "-E")...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_sub -E: %v: %s", err, out)
	}
	tr := r.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, &handler.Message{ID: "e1", Key: "dev-a", Topic: topic, Payload: []byte("hi"), Headers: map[string]string{
		"trace": "t1", mqtt.HeaderContentType: "text/plain", mqtt.HeaderCorrelationID: "c-9", mqtt.HeaderReplyTo: "replies/9",
		mqtt.HeaderMessageExpiry: "3600", mqtt.HeaderPayloadFormat: "utf-8",
	}}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(subBin, append(args, "-C", "1", "-W", "10", "-F", "%j")...).Output()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v: %s", err, out)
	}
	var got struct {
		Payload    string `json:"payload"`
		Properties struct {
			User          map[string]string `json:"user-properties"`
			ContentType   string            `json:"content-type"`
			Correlation   string            `json:"correlation-data"`
			ResponseTopic string            `json:"response-topic"`
			Format        int               `json:"payload-format-indicator"`
			Expiry        int               `json:"message-expiry-interval"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("mosquitto_sub printed %q: %v", out, err)
	}
	p := got.Properties
	if got.Payload != "hi" || p.User["ferry-id"] != "e1" || p.User["ferry-key"] != "dev-a" || p.User["trace"] != "t1" ||
		!strings.HasSuffix(p.User["ferry-seq"], ":1") || len(p.User) != 4 {
		t.Errorf("payload %q, user properties %v; want hi, ferry-id e1, ferry-key dev-a, trace t1, ferry-seq <publisher>:1", got.Payload, p.User)
	}
	if p.ContentType != "text/plain" || p.Correlation != "c-9" || p.ResponseTopic != "replies/9" || p.Format != 1 || p.Expiry < 3599 {
		t.Errorf("properties %+v; want the ones the headers name", p)
	}
}
