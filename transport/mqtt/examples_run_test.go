package mqtt_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// TestExamplesRun runs the package's examples against the shared broker
// and checks what they print, so that the page's code works as shown.
func TestExamplesRun(t *testing.T) {
	r := shared(t)
	clean := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tr := r.open(t)
		for _, id := range []string{"inventory-1", "edge-lyon", "ops-lyon"} {
			if err := tr.RemoveSession(ctx, id); err != nil {
				t.Errorf("RemoveSession(%s): %v", id, err)
			}
		}
		for _, sub := range []transport.Subscription{{Group: "inventory"}, {Consumer: "edge-lyon"}, {Consumer: "ops-lyon"}} {
			if err := tr.RemoveDLQ(ctx, transport.DLQName(tr, sub)); err != nil {
				t.Errorf("RemoveDLQ: %v", err)
			}
		}
	}
	clean()
	t.Cleanup(clean)
	for _, c := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example_openFromURL", Example_openFromURL, "evt-1 order-42 t1 {\"order\":42}\n"},
		{"ExampleNew_rawDevices", ExampleNew_rawDevices, "dev-7 r-1: {\"id\":\"r-1\",\"celsius\":21.5}\n"},
		{"Example_publishOptions", Example_publishOptions, "alert-9 application/json true\n"},
	} {
		if got := captureStdout(t, c.run); got != c.want {
			t.Errorf("%s printed %q, want %q", c.name, got, c.want)
		}
	}
}

// captureStdout runs f and returns what it wrote to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	rd, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, rd)
		out <- b.String()
	}()
	defer func() { os.Stdout = old }()
	f()
	_ = w.Close()
	return <-out
}
