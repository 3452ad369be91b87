package claims_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/internal/claims"
)

// TestTransportPages: every statement of every docs/transports page names
// a test that exists, or is marked broker documentation or (design).
func TestTransportPages(t *testing.T) {
	ix, err := claims.Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("../../docs/transports/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/transports: %v", err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p, "../../")
		if len(claims.Statements(b)) == 0 {
			t.Errorf("%s: no statements found", rel)
		}
		for _, pr := range ix.CheckPage(b) {
			t.Errorf("%s:%d: %s", rel, pr.Line, pr.Msg)
		}
	}
}

// TestCheckerFails: the checker finds a statement without proof, a test
// that does not exist, and a subtest no literal names, and accepts the
// forms of proof the rule allows.
func TestCheckerFails(t *testing.T) {
	ix, err := claims.Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Join([]string{
		"# Title",
		"",
		"Acks are coalesced (`TestConformance/Ack`).",
		"",
		"Messages are never lost.",
		"",
		"Mosquitto drops what is over its queue limit (broker documentation).",
		"",
		"Prefer the envelope (design: it keeps the ID).",
		"",
		"The suite runs:",
		"",
		"- on the default URL (`TestNoSuchTest`);",
		"- on a FIFO queue (`TestTransportPages/NoSuchSubtest`).",
		"",
		"Checked by `TestTransportPages`:",
		"",
		"- one thing;",
		"- another.",
		"",
		"| field | value |",
		"|---|---|",
		"| Ordering | per-key (`TestConformance/Ordering/PerKey`) |",
		"| Ack | per-message |",
		"",
		"```go",
		"unproven code is doccheck's business",
		"```",
	}, "\n")
	var got []string
	for _, p := range ix.CheckPage([]byte(page)) {
		got = append(got, p.Msg)
	}
	want := []string{
		"names no test, and is not marked broker documentation or (design): Messages are never lost.",
		"no _test.go file defines TestNoSuchTest",
		`subtest "NoSuchSubtest" of TestTransportPages: no string literal in the module names it`,
		"names no test, and is not marked broker documentation or (design): | Ack | per-message |",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
