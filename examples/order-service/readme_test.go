package main

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/transport"
)

// docRow is a row of the README's table "One URL per broker": the URL and
// the query options the row names, each as key=value.
type docRow struct {
	url     string
	options []string
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// readmeURLs parses the README's URL table: under the heading
// "## One URL per broker", each row's second column holds the URL, and the
// third the options, each as `key=value`.
func readmeURLs(t *testing.T) []docRow {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## One URL per broker\n")
	if !ok {
		t.Fatal(`the README has no section "## One URL per broker"`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var rows []docRow
	for _, line := range strings.Split(section, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.Contains(cols[2], "://") {
			continue
		}
		m := codeSpan.FindStringSubmatch(cols[2])
		if m == nil {
			t.Fatalf("README URL table: no URL in %q", line)
		}
		r := docRow{url: m[1]}
		for _, o := range codeSpan.FindAllStringSubmatch(cols[3], -1) {
			if strings.Contains(o[1], "=") && !strings.Contains(o[1], " ") {
				r.options = append(r.options, o[1])
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// TestREADMEURLs opens every URL of the README's table, as documented
// (pointed at this machine's test brokers: see package testbrokers), and
// then with every option its row names, and asks the transport what a
// subscription would declare: a URL or an option that does not work fails.
// Every registered scheme must have a row.
func TestREADMEURLs(t *testing.T) {
	rows := readmeURLs(t)
	seen := map[string]bool{}
	for _, r := range rows {
		s := scheme(r.url)
		if seen[s] {
			t.Fatalf("two README rows for %s://", s)
		}
		seen[s] = true
		if len(r.options) == 0 {
			t.Errorf("the README row of %s names no option", s)
		}
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			open := func(raw string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				tr, err := transport.Open(ctx, raw)
				if err != nil {
					t.Fatalf("open %s: %v", transport.RedactString(raw), err)
				}
				defer tr.Close(context.Background())
				if d, ok := tr.(transport.Declarer); ok {
					if _, err := d.Declare(transport.Subscription{Topic: "orders", Group: "readme"}); err != nil {
						t.Fatalf("declare on %s: %v", transport.RedactString(raw), err)
					}
				}
			}
			open(testbrokers.URL(t, r.url))
			u, err := url.Parse(testbrokers.URL(t, r.url))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			for _, o := range r.options {
				k, v, _ := strings.Cut(o, "=")
				if q.Has(k) {
					t.Fatalf("option %s repeats a key of the URL", o)
				}
				q.Set(k, v)
			}
			u.RawQuery = q.Encode()
			open(u.String())
		})
	}
	for _, s := range transport.Schemes() {
		if !seen[s] && s != "amqps" && s != "rediss" && s != "mqtts" {
			t.Errorf("the README's URL table has no row for %s://", s)
		}
	}
}

// readmeSummary returns the text block the README shows under "## Two
// commands" as the output of the main command.
func readmeSummary(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Two commands\n")
	if !ok {
		t.Fatal(`the README has no section "## Two commands"`)
	}
	_, block, ok := strings.Cut(section, "\n```text\n")
	if !ok {
		t.Fatal("the README shows no output of the main command")
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}
