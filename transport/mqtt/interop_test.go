package mqtt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/ferrytest"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// TestInteropMosquittoPub: readings published with mosquitto_pub on a
// device topic are handled by a Router, raw, with the ID read from the JSON
// and the device ID (a topic level) as Key, in order per device, on both
// protocols.
func TestInteropMosquittoPub(t *testing.T) {
	eachProtocol(t, testInteropMosquittoPub)
}

func testInteropMosquittoPub(t *testing.T, p protocol) {
	r := shared(t)
	pubBin := requireBinary(t, "mosquitto_pub")
	tr := r.open(t, p.opt(), mqtt.PayloadFormat(mqtt.Raw), mqtt.IDFrom(mqtt.IDFunc(mqtt.JSONField("id"))), mqtt.KeyFrom(mqtt.TopicLevel(3)))
	site := transporttest.UniqueName(t, "site")

	var mu sync.Mutex
	got := map[string][]string{} // key -> IDs in handling order
	payloads := map[string]string{}
	done := make(chan struct{})
	total := 0
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.Key] = append(got[m.Key], m.ID)
		payloads[m.ID] = string(m.Payload)
		if total++; total == 10 {
			close(done)
		}
		return nil
	})
	rt, err := ferry.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	sub := transport.Subscription{Topic: "sites/" + site + "/sensors/+/temperature", Consumer: transporttest.UniqueName(t, "c")}
	if err := rt.Add("interop", tr, sub, h); err != nil {
		t.Fatal(err)
	}
	ferrytest.Start(t, rt)

	for i := range 5 {
		for _, dev := range []string{"dev-a", "dev-b"} {
			body := fmt.Sprintf(`{"id":"%s-%d","celsius":%d.5}`, dev, i, 20+i)
			out, err := exec.Command(pubBin, "-h", "127.0.0.1", "-p", port(), "-q", "1",
				"-t", "sites/"+site+"/sensors/"+dev+"/temperature", "-m", body).CombinedOutput()
			if err != nil {
				t.Fatalf("mosquitto_pub: %v: %s", err, out)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("only %d of 10 readings handled", total)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, dev := range []string{"dev-a", "dev-b"} {
		want := []string{dev + "-0", dev + "-1", dev + "-2", dev + "-3", dev + "-4"}
		if fmt.Sprint(got[dev]) != fmt.Sprint(want) {
			t.Errorf("device %s handled %v, want %v in order", dev, got[dev], want)
		}
	}
	if p := payloads["dev-a-3"]; p != `{"id":"dev-a-3","celsius":23.5}` {
		t.Errorf("payload changed on the way: %q", p)
	}
}

// TestInteropMosquittoSub: what Ferry publishes on MQTT 3.1.1, raw and in
// the envelope, mosquitto_sub receives: raw bytes as they were, and the
// envelope as the documented JSON.
func TestInteropMosquittoSub(t *testing.T) {
	r := shared(t)
	subBin := requireBinary(t, "mosquitto_sub")
	topic := "ferry-test/" + transporttest.UniqueName(t, "interop")
	id := transporttest.UniqueName(t, "msub")
	r.add(id)
	// A persistent session first, so that nothing published next is missed.
	args := []string{"-h", "127.0.0.1", "-p", port(), "-q", "1", "-c", "-i", id, "-t", topic}
	if out, err := exec.Command(subBin, append(args, "-E")...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_sub -E: %v: %s", err, out)
	}
	raw := r.open(t, mqtt.Protocol(mqtt.MQTT311), mqtt.PayloadFormat(mqtt.Raw))
	env := r.open(t, mqtt.Protocol(mqtt.MQTT311))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := raw.Publish(ctx, &handler.Message{Topic: topic, Payload: []byte(`{"celsius":21.5}`)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Publish(ctx, &handler.Message{ID: "e1", Key: "dev-a", Topic: topic, Payload: []byte("hi"), Headers: map[string]string{"trace": "t1"}}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(subBin, append(args, "-C", "2", "-W", "10")...).Output()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] != `{"celsius":21.5}` {
		t.Fatalf("mosquitto_sub got %q; want the raw reading, then the envelope", lines)
	}
	var e struct {
		Ferry   int               `json:"ferry"`
		ID      string            `json:"id"`
		Key     string            `json:"key"`
		Headers map[string]string `json:"headers"`
		Text    string            `json:"text"`
		Pub     string            `json:"pub"`
		Seq     uint64            `json:"seq"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil {
		t.Fatalf("envelope %q is not JSON: %v", lines[1], err)
	}
	if e.Ferry != 1 || e.ID != "e1" || e.Key != "dev-a" || e.Headers["trace"] != "t1" || e.Text != "hi" || e.Pub == "" || e.Seq != 1 {
		t.Errorf("envelope = %+v", e)
	}
}

// port is the shared broker's port.
func port() string {
	a := brokerAddr()
	return a[strings.LastIndexByte(a, ':')+1:]
}
