package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testenv"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the command output shown in docs/operations.md")

const opsDoc = "../../docs/operations.md"

// docStep is one command shown in docs/operations.md: args as the page
// prints them (topic orders, group inventory, subscription inventory),
// run against this test's own names and brokers, after before.
type docStep struct {
	name   string
	args   string
	code   int
	before func(t *testing.T)
}

// normalize makes an output stable for the page: this run's names become
// the page's, and times and ages a fixed example.
func normalize(s string, names [][2]string) string {
	for _, n := range names {
		s = strings.ReplaceAll(s, n[0], n[1])
	}
	s = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`).ReplaceAllString(s, "2026-12-01T09:14:03Z")
	s = regexp.MustCompile(`(?m)(\s)(\d+ms|\d+(\.\d+)?s|\d+m\d+s)(\s|$)`).ReplaceAllString(s, "${1}4s${4}")
	s = regexp.MustCompile(`"(age|oldest_age)": \d+\.\d+`).ReplaceAllString(s, `"$1": 4.000`)
	s = regexp.MustCompile(`"\d{13}-\d+"`).ReplaceAllString(s, `"1796099502643-0"`)
	s = regexp.MustCompile(`\(\d+(ms|s) ago\)`).ReplaceAllString(s, "(4s ago)")
	return s
}

// TestOperationsDoc runs every command docs/operations.md shows, in the
// page's order, against a Router on this machine's Redis (and kfake for
// the Kafka section), and fails when the page's output differs from the
// real one (names, times and ages normalized). -update-docs rewrites it.
func TestOperationsDoc(t *testing.T) {
	dir := t.TempDir()
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	// Names as long as the page's, so that the tables' columns stay aligned
	// when they are swapped back.
	r := ops.NewID()
	topic, group := "o"+r[:5], "i"+r[5:13]
	redisURL := testbrokers.URL(t, "redis://127.0.0.1:6379")
	lotDSN := testenv.RedisURL() + "?prefix=doc-" + id
	kafkaURL := testbrokers.URL(t, "kafka://127.0.0.1:9092")
	names := [][2]string{{lotDSN, "redis://127.0.0.1:6379"}, {redisURL, "redis://127.0.0.1:6379"},
		{kafkaURL, "kafka://127.0.0.1:9092"}, {topic, "orders"}, {group, "inventory"}}
	t.Setenv("FERRY_URL", redisURL)
	t.Setenv("FERRY_PARKING", lotDSN)
	applied, fixed := filepath.Join(dir, "applied.txt"), filepath.Join(dir, "fixed")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var svcErr = make(chan error, 1)
	ready := filepath.Join(dir, "ready")
	ferry := func(args ...string) (string, int) {
		var out bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &out)
		return out.String(), code
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	lines := func() int {
		b, _ := os.ReadFile(applied)
		return strings.Count(string(b), "\n")
	}
	dlqCount := func() int {
		tr, err := ops.Open(ctx, redisURL)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(ctx)
		ds, _ := ops.ListDLQ(ctx, tr, group+".dlq", 0)
		return len(ds)
	}
	steps := []docStep{
		{name: "dlq-ls", args: "dlq ls --group inventory", before: func(t *testing.T) {
			go func() { svcErr <- service(ctx, redisURL, topic, group, lotDSN, applied, fixed, ready) }()
			waitFor("the service", func() bool { _, err := os.Stat(ready); return err == nil })
			for _, a := range [][]string{
				{"publish", "--topic", topic, "--id", "evt-1", `{"sku":"A-1","qty":2}`},
				{"publish", "--topic", topic, "--id", "evt-2", "bad: qty -1"},
				{"publish", "--topic", topic, "--id", "evt-3", "--key", "order-7", "bad: SKU B-9 unknown"},
				{"publish", "--topic", topic, "--id", "evt-4", "--key", "order-7", `{"sku":"B-9","qty":1}`},
			} {
				if out, code := ferry(a...); code != 0 {
					t.Fatalf("ferry %v: %s", a, out)
				}
			}
			waitFor("the dead letter", func() bool { return dlqCount() == 2 }) // evt-2, and evt-3's visibility copy
		}},
		{name: "dlq-show", args: "dlq show --group inventory evt-2"},
		{name: "dlq-replay-dry", args: "dlq replay --group inventory evt-2 --dry-run", before: func(t *testing.T) {
			if err := os.WriteFile(fixed, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dlq-replay", args: "dlq replay --group inventory evt-2"},
		{name: "dlq-replay-again", args: "dlq replay --group inventory evt-2", code: 1, before: func(t *testing.T) {
			waitFor("evt-2 applied", func() bool { return lines() == 2 })
		}},
		{name: "parked-ls", args: "parked ls"},
		{name: "parked-show", args: "parked show --subscription inventory order-7"},
		{name: "parked-release", args: "parked release --subscription inventory order-7"},
		{name: "lag", args: "lag --topic orders --group inventory", before: func(t *testing.T) {
			waitFor("order-7 applied", func() bool { return lines() == 4 })
			time.Sleep(200 * time.Millisecond)
		}},
		{name: "publish", args: `publish --topic orders --id evt-9 --key order-9 -H tenant=acme {"sku":"C-3","qty":5}`},
		{name: "kafka-reset-dry", args: "offsets reset --url kafka://127.0.0.1:9092 --topic orders --group inventory --to-earliest --dry-run", before: func(t *testing.T) {
			// a stopped Kafka group that consumed four messages
			kctx, kcancel := context.WithCancel(ctx)
			kready := filepath.Join(dir, "kready")
			kdone := make(chan error, 1)
			go func() {
				kdone <- service(kctx, kafkaURL, topic, group, "", filepath.Join(dir, "kapplied"), fixed, kready)
			}()
			waitFor("the Kafka service", func() bool { _, err := os.Stat(kready); return err == nil })
			for i := 1; i <= 4; i++ {
				if out, code := ferry("publish", "--url", kafkaURL, "--topic", topic, "--key", "k", "--id", "k-"+strconv.Itoa(i), "x"); code != 0 {
					t.Fatal(out)
				}
			}
			waitFor("the Kafka group to consume and commit", func() bool {
				rows, code := ferry("lag", "--url", kafkaURL, "--topic", topic, "--group", group, "-o", "json")
				return code == 0 && fileLines(filepath.Join(dir, "kapplied")) == 4 && !regexp.MustCompile(`"messages": [1-9]`).MatchString(rows)
			})
			kcancel()
			if err := <-kdone; err != nil {
				t.Fatal(err)
			}
		}},
		{name: "kafka-reset", args: "offsets reset --url kafka://127.0.0.1:9092 --topic orders --group inventory --to-earliest"},
		{name: "semantics", args: "semantics redis://127.0.0.1:6379?shards=4"},
		{name: "error", args: "dlq ls --url redis://127.0.0.1:1 --group inventory", code: 1},
	}
	doc, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(doc)
	for _, st := range steps {
		if st.before != nil {
			st.before(t)
		}
		args := strings.Fields(st.args)
		if st.name == "publish" {
			args = append(strings.Fields(strings.SplitN(st.args, " {", 2)[0]), "{"+strings.SplitN(st.args, " {", 2)[1])
		}
		real := make([]string, len(args))
		for i, a := range args {
			switch a {
			case "orders":
				a = topic
			case "inventory":
				a = group
			case "kafka://127.0.0.1:9092":
				a = kafkaURL
			}
			real[i] = a
		}
		out, code := ferry(real...)
		if code != st.code {
			t.Fatalf("ferry %s: exit %d, want %d:\n%s", st.args, code, st.code, out)
		}
		shownArgs := st.args
		if st.name == "publish" || st.name == "semantics" {
			shownArgs = strings.Replace(shownArgs, `{"sku"`, `'{"sku"`, 1)
			if st.name == "publish" {
				shownArgs += "'"
			} else {
				shownArgs = strings.Replace(shownArgs, "redis://", "'redis://", 1) + "'"
			}
		}
		shown := normalize(out, names)
		if st.name == "semantics" {
			shown = out // declared, not measured: its durations (the delay's precision) are the code's
		}
		block := "```console\n$ ferry " + shownArgs + "\n" + shown + "```\n"
		marker := "<!-- ferry: " + st.name + " -->\n"
		i := strings.Index(page, marker)
		if i < 0 {
			t.Fatalf("%s has no %q", opsDoc, strings.TrimSpace(marker))
		}
		start := i + len(marker)
		end := start
		if strings.HasPrefix(page[start:], "```console\n") {
			end = start + strings.Index(page[start+3:], "```\n") + 3 + 4
		}
		page = page[:start] + block + page[end:]
	}
	cancel()
	if err := <-svcErr; err != nil {
		t.Errorf("service: %v", err)
	}
	if *updateDocs {
		if err := os.WriteFile(opsDoc, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if page != string(doc) {
		t.Errorf("docs/operations.md differs from the commands' real output: run go test ./cmd/ferry -run TestOperationsDoc -update-docs and review")
	}
}

func fileLines(name string) int {
	b, _ := os.ReadFile(name)
	return strings.Count(string(b), "\n")
}
