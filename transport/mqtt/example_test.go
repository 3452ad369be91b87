package mqtt_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/mqtt"
)

// Open an MQTT transport by URL: raw device readings keyed by the device
// level of the topic, and subscribe to every device of a site.
func Example_openFromURL() {
	ctx := context.Background()
	t, err := transport.Open(ctx, "mqtt://127.0.0.1:1883?key=level:3&client_id=edge-1")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close(ctx)
	st, err := t.Subscribe(ctx, transport.Subscription{
		Topic:    "sites/lyon/sensors/+/temperature",
		Consumer: "edge-lyon", // the persistent session's client ID
	})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close(ctx)
	err = t.Publish(ctx, &handler.Message{Topic: "sites/lyon/sensors/dev-7/temperature", Payload: []byte(`{"celsius":21.5}`)})
	if err != nil {
		log.Fatal(err)
	}
	d, err := st.Receive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", d.Message().Key, d.Message().Payload)
	_ = d.Ack(ctx)
}
