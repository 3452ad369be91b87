package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/internal/testbrokers"
	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/store/pgstore"
)

func TestMain(m *testing.M) {
	testscript.Main(fauxqsMain{m}, map[string]func(){
		"ferry":         func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
		"ferry-service": serviceMain,
	})
}

// fauxqsMain stops the SQS/SNS emulator the tests started, after them.
type fauxqsMain struct{ m *testing.M }

func (f fauxqsMain) Run() int { return fauxqs.Main(f.m) }

// e2eTransport is one broker the scripts run against.
type e2eTransport struct {
	name, url string
	parking   bool // ordered: the parked-key scripts run too
	pgLot     bool // the lot on PostgreSQL (else on Redis)
}

func e2eTransports(t *testing.T) []e2eTransport {
	return []e2eTransport{
		{"redis", testbrokers.URL(t, "redis://127.0.0.1:6379"), true, false},
		{"rabbitmq", testbrokers.URL(t, "amqp://guest:guest@127.0.0.1:5672/"), true, false},
		{"nats", testbrokers.URL(t, "nats://127.0.0.1:4222"), true, true},
		{"kafka", testbrokers.URL(t, "kafka://127.0.0.1:9092"), true, true},
		{"mqtt", testbrokers.URL(t, "mqtt://127.0.0.1:1883"), false, false},
		{"sqs", testbrokers.URL(t, "sqs://?region=us-east-1&wait=1s&visibility=5s"), false, false},
	}
}

// TestE2E builds nothing of its own: testscript runs this test binary as
// the ferry command and as the service, in separate processes, against the
// brokers on this machine (kfake in this process, fauxqs as its own).
func TestE2E(t *testing.T) {
	for _, tr := range e2eTransports(t) {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			files := []string{"testdata/e2e/dlq.txtar"}
			if tr.parking {
				files = append(files, "testdata/e2e/parked.txtar")
			}
			lotDSN := func(id string) string { return testenv.RedisURL() + "?prefix=e2e-" + id }
			if tr.pgLot {
				lotDSN = pgLot(t)
			}
			if tr.name == "redis" || tr.name == "kafka" {
				files = append(files, "testdata/e2e/offsets.txtar")
			}
			testscript.Run(t, testscript.Params{
				Files:               files,
				RequireExplicitExec: true,
				Setup: func(env *testscript.Env) error {
					id := strconv.FormatInt(time.Now().UnixNano(), 36)
					env.Setenv("FERRY_URL", tr.url)
					env.Setenv("URL", tr.url)
					env.Setenv("TOPIC", "e2e-"+tr.name+"-"+id)
					env.Setenv("GROUP", "g-"+tr.name+"-"+id)
					env.Setenv("PARKING", lotDSN(id))
					for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
						env.Setenv(k, os.Getenv(k))
					}
					return nil
				},
				Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
					"waitlines":  waitLines,
					"waitparked": waitParked,
					"waitdlq":    waitDLQ,
					"sumlag":     sumLag,
					"waitlag":    waitLag,
					"sleep":      sleepCmd,
				},
				Condition: func(cond string) (bool, error) {
					switch cond {
					case "lag": // the broker reports lag
						return tr.name != "mqtt", nil
					case "redis", "rabbitmq", "nats", "kafka", "mqtt", "sqs":
						return tr.name == cond, nil
					}
					return false, fmt.Errorf("unknown condition %q", cond)
				},
			})
		})
	}
}

func eventually(ts *testscript.TestScript, what string, cond func() (bool, error)) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("timed out waiting for %s (last error: %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitlines FILE N: wait until FILE has exactly N lines (fail at once on
// more).
func waitLines(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: waitlines FILE N")
	}
	n, _ := strconv.Atoi(args[1])
	eventually(ts, args[0]+" to have "+args[1]+" lines", func() (bool, error) {
		f, err := os.Open(ts.MkAbs(args[0]))
		if err != nil {
			return n == 0, err
		}
		defer f.Close()
		got := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			got++
		}
		if got > n {
			ts.Fatalf("%s has %d lines, want %d", args[0], got, n)
		}
		return got == n, nil
	})
}

// waitparked KEY N: wait until KEY is parked on $GROUP with N messages.
func waitParked(ts *testscript.TestScript, neg bool, args []string) {
	n, _ := strconv.Atoi(args[1])
	lot, err := ops.OpenLot(context.Background(), ts.Getenv("PARKING"))
	ts.Check(err)
	defer lot.Close()
	eventually(ts, args[0]+" parked with "+args[1], func() (bool, error) {
		k, err := lot.Key(context.Background(), ts.Getenv("GROUP"), args[0])
		if errors.Is(err, parking.ErrNotParked) {
			return false, err
		}
		return err == nil && k.Count == n, err
	})
}

// waitdlq N: wait until $GROUP's DLQ holds N dead letters.
func waitDLQ(ts *testscript.TestScript, neg bool, args []string) {
	n, _ := strconv.Atoi(args[0])
	ctx := context.Background()
	t, err := ops.Open(ctx, ts.Getenv("URL"))
	ts.Check(err)
	defer t.Close(ctx)
	name, err := ops.DLQOf(t, ts.Getenv("TOPIC"), ts.Getenv("GROUP"), "")
	ts.Check(err)
	eventually(ts, fmt.Sprintf("%d dead letters", n), func() (bool, error) {
		ds, err := ops.ListDLQ(ctx, t, name, 0)
		return err == nil && len(ds) == n, err
	})
}

// sumlag N: the last command's stdout (ferry lag -o json) sums to N
// messages behind.
func sumLag(ts *testscript.TestScript, neg bool, args []string) {
	var rows []ops.LagRow
	ts.Check(json.Unmarshal([]byte(ts.ReadFile("stdout")), &rows))
	var sum int64
	for _, r := range rows {
		sum += r.Messages
	}
	if strconv.FormatInt(sum, 10) != strings.TrimSpace(args[0]) {
		ts.Fatalf("lag sums to %d, want %s (%+v)", sum, args[0], rows)
	}
}

// waitlag N: run `ferry lag -o json` until it sums to N messages behind
// (the consumers commit or ack in the background).
func waitLag(ts *testscript.TestScript, neg bool, args []string) {
	eventually(ts, "lag "+args[0], func() (bool, error) {
		if err := ts.Exec("ferry", "lag", "--topic", ts.Getenv("TOPIC"), "--group", ts.Getenv("GROUP"), "-o", "json"); err != nil {
			return false, err
		}
		var rows []ops.LagRow
		if err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &rows); err != nil {
			return false, err
		}
		var sum int64
		for _, r := range rows {
			sum += r.Messages
		}
		return strconv.FormatInt(sum, 10) == args[0], fmt.Errorf("lag %d", sum)
	})
}

// secrets are the credentials the error script puts in URLs: none may
// appear on the command's standard error (internal/credleak's list).
var secrets = []string{"credleakUserQ7x", "credleakPassZ9y", "credleakTokenK3w"}

// fails CODE ferry ARGS...: the command exits with CODE and writes one
// line to stderr, "ferry: …", with no secret in it.
func fails(ts *testscript.TestScript, neg bool, args []string) {
	err := ts.Exec(args[1], args[2:]...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		ts.Fatalf("%v: want exit status %s, got %v", args[1:], args[0], err)
	}
	if got := strconv.Itoa(ee.ExitCode()); got != args[0] {
		ts.Fatalf("exit status %s, want %s", got, args[0])
	}
	stderr := ts.ReadFile("stderr")
	for _, s := range secrets {
		if strings.Contains(stderr, s) {
			ts.Fatalf("stderr leaks %q: %s", s, stderr)
		}
	}
	if !strings.HasPrefix(stderr, "ferry: ") || strings.Count(stderr, "\n") != 1 {
		ts.Fatalf("stderr is not one line starting with \"ferry: \": %q", stderr)
	}
}

// TestE2EErrors runs the bad-input script once: unknown scheme,
// unreachable broker, wrong credentials, a missing group or message, bad
// flags; exit codes, one-line errors, and no credential on stderr.
func TestE2EErrors(t *testing.T) {
	topic := "ferry-e2e-stdin-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rc := testenv.Redis(t)
	t.Cleanup(func() { rc.Del(context.Background(), topic) })
	testscript.Run(t, testscript.Params{
		Files:               []string{"testdata/e2e/errors.txtar"},
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("TOPIC", topic)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){"fails": fails},
	})
}

// sleep DURATION.
func sleepCmd(ts *testscript.TestScript, neg bool, args []string) {
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}

// pgLot returns a function that makes a PostgreSQL lot per script: its
// tables migrated under a fresh prefix, dropped when t ends.
func pgLot(t *testing.T) func(id string) string {
	db := testenv.Postgres(t, 2)
	return func(id string) string {
		prefix := "e2e_" + strings.ReplaceAll(id, "-", "_")
		ctx := context.Background()
		if err := pgstore.MigrateParking(ctx, db, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, tb := range []string{"_keys", "_messages", "_versions", "_audit"} {
				_, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+prefix+tb)
			}
		})
		sep := "?"
		if strings.Contains(testenv.PostgresURL(), "?") {
			sep = "&"
		}
		return testenv.PostgresURL() + sep + "prefix=" + prefix
	}
}
