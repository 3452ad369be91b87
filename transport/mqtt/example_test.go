package mqtt_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// Open an MQTT transport by URL: MQTT 5, ID, Key and headers in user
// properties, so the consumer gets the Message back as it was published.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "mqtt://127.0.0.1:1883")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	st, err := t.Subscribe(ctx, transport.Subscription{Topic: "orders/placed", Group: "inventory", Consumer: "inventory-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(ctx)
	err = t.Publish(ctx, &handler.Message{ID: "evt-1", Key: "order-42", Topic: "orders/placed",
		Payload: []byte(`{"order":42}`), Headers: map[string]string{"trace": "t1"}})
	if err != nil {
		log.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := d.Message()
	fmt.Println(m.ID, m.Key, m.Headers["trace"], string(m.Payload))
	_ = d.Ack(ctx)
}

// Build an MQTT transport for raw device readings with New: format=raw in
// the URL, the device ID (topic level 3) as Key, and a typed option after
// the URL's.
func ExampleNew_rawDevices() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := mqtt.New(ctx, "mqtt://127.0.0.1:1883?format=raw&key=level:3",
		mqtt.IDFrom(mqtt.IDFunc(mqtt.FirstOf(mqtt.JSONField("id"), mqtt.ContentHash))))
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	st, err := t.Subscribe(ctx, transport.Subscription{Topic: "sites/lyon/sensors/+/temperature", Consumer: "edge-lyon"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(ctx)
	// A device publishes a bare reading (here through t, as mosquitto_pub would).
	err = t.Publish(ctx, &handler.Message{Topic: "sites/lyon/sensors/dev-7/temperature", Payload: []byte(`{"id":"r-1","celsius":21.5}`)})
	if err != nil {
		log.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s: %s\n", d.Message().Key, d.Message().ID, d.Message().Payload)
	_ = d.Ack(ctx)
}

// Publish options travel as headers, so that they survive an outbox or a
// store-and-forward buffer: mqtt-message-expiry sets MQTT 5's Message
// Expiry Interval, and content-type its Content Type. The consumer sees
// what is left of the interval.
func Example_publishOptions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := mqtt.New(ctx, "mqtt://127.0.0.1:1883")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	st, err := t.Subscribe(ctx, transport.Subscription{Topic: "sites/lyon/alerts", Consumer: "ops-lyon"})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(ctx)
	err = t.Publish(ctx, &handler.Message{ID: "alert-9", Key: "dev-7", Topic: "sites/lyon/alerts", Payload: []byte(`{"celsius":41}`),
		Headers: map[string]string{mqtt.HeaderMessageExpiry: "300", mqtt.HeaderContentType: "application/json"}})
	if err != nil {
		log.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := d.Message()
	left, _ := strconv.Atoi(m.Headers[mqtt.HeaderMessageExpiry])
	fmt.Println(m.ID, m.Headers[mqtt.HeaderContentType], left > 290)
	_ = d.Ack(ctx)
}
