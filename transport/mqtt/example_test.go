package mqtt_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// Open an MQTT transport by URL, on the default envelope: the consumer
// gets the Message back as it was published, ID, Key and headers included.
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
