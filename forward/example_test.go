package forward_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrymq/ferry/forward"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	_ "github.com/ferrymq/ferry/transport/memory"
)

// A Buffer in front of an upstream transport: Publish returns once the
// reading is on local disk, and the Buffer forwards it in order.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "edge")
	defer os.RemoveAll(dir)
	upstream, _ := transport.Open(ctx, "memory://uplink")
	defer upstream.Close(ctx)
	readings, _ := upstream.Subscribe(ctx, transport.Subscription{Topic: "readings", Group: "backbone"})

	buf, err := forward.New(filepath.Join(dir, "uplink.db"), upstream)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close(ctx)
	for i := 1; i <= 3; i++ {
		m := &handler.Message{ID: fmt.Sprint("dev-7/", i), Key: "dev-7", Topic: "readings", Payload: []byte(fmt.Sprint(20+i, " °C"))}
		if err := buf.Publish(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = buf.Flush(ctx)
	for range 3 {
		d, _ := readings.Receive(ctx)
		fmt.Println(d.Message().ID, string(d.Message().Payload))
		_ = d.Ack(ctx)
	}
	fmt.Println("pending:", buf.Stats().Pending)
	// Output:
	// dev-7/1 21 °C
	// dev-7/2 22 °C
	// dev-7/3 23 °C
	// pending: 0
}
