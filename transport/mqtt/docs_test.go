package mqtt_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

const docsPage = "../../docs/transports/mqtt.md"

// TestDocsPage: every Go block of docs/transports/mqtt.md is the text of
// an example in example_test.go (which TestExamplesRun runs), and every
// test the page names as proof exists in this package, the conformance
// suite or the IoT example.
func TestDocsPage(t *testing.T) {
	page, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	examples, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(page, -1)
	if len(blocks) == 0 {
		t.Fatal("no Go code on the page")
	}
	norm := func(b []byte) string {
		var lines []string
		for l := range strings.SplitSeq(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	for _, b := range blocks {
		if !strings.Contains(norm(examples), norm(b[1])) {
			t.Errorf("this block of %s is not in example_test.go, so no test compiles and runs it:\n%s", docsPage, b[1])
		}
	}

	var defined strings.Builder
	for _, glob := range []string{"*_test.go", "../transporttest/*.go", "../../examples/iot/*_test.go", "../../forward/*_test.go"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			defined.Write(b)
		}
	}
	named := regexp.MustCompile(`\b((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)(/[A-Za-z0-9_=/]+)?`).FindAllStringSubmatch(string(page), -1)
	if len(named) < 10 {
		t.Errorf("the page names %d tests; every statement should name the test that proves it", len(named))
	}
	for _, n := range named {
		if !strings.Contains(defined.String(), "func "+n[1]+"(") {
			t.Errorf("%s names %s, which does not exist", docsPage, n[0])
		}
		if strings.HasPrefix(n[1], "TestConformance") && n[2] != "" {
			// A suite case: its name is in the suite's table of cases.
			if c := n[2][1:]; !strings.Contains(defined.String(), `{"`+c+`", `) {
				t.Errorf("%s names the suite case %s, which does not exist", docsPage, n[0])
			}
		}
	}
}

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
