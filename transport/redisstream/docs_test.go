package redisstream_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/handler"
)

// TestDocsSnippets: every Go block of docs/transports/redis-streams.md is
// quoted, line for line, from this package's examples, which go test
// compiles; so the page's code cannot rot.
func TestDocsSnippets(t *testing.T) {
	page, err := os.ReadFile("../../docs/transports/redis-streams.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	examples := "\n" + trimLines(string(src)) + "\n"
	blocks := strings.Split(string(page), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("the page has no Go block")
	}
	for _, b := range blocks {
		code, _, _ := strings.Cut(b, "```")
		if !strings.Contains(examples, "\n"+trimLines(code)+"\n") {
			t.Errorf("the page's Go block is not in example_test.go:\n%s", code)
		}
	}
}

// trimLines removes each line's indentation and the blank lines at the
// ends of s.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}

// TestMaxLen: by default, and with maxlen=n, every XADD trims its stream
// (MAXLEN ~, so Redis keeps whole nodes of up to 100 entries beyond n);
// maxlen=0 keeps everything.
func TestMaxLen(t *testing.T) {
	requireShared(t)
	for _, c := range []struct {
		query    string
		min, max int64
	}{
		{"maxlen=10", 10, 10 + 100},
		{"maxlen=0", 500, 500},
	} {
		topic := uniq("maxlen")
		cleanupKeys(t, sharedAddr, topic)
		tr := open(t, "redis://"+sharedAddr+"?"+c.query)
		msgs := make([]*handler.Message, 500)
		for i := range msgs {
			msgs[i] = &handler.Message{Topic: topic, Payload: []byte("x")}
		}
		if err := tr.PublishBatch(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		n, err := tr.Client().XLen(context.Background(), topic).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n < c.min || n > c.max {
			t.Errorf("%s: 500 published, XLEN %d; want %d to %d", c.query, n, c.min, c.max)
		}
	}
}
