package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// suite is one go test -bench run: a package's own comparative
// benchmarks, each of which runs its interleaved rounds and reports
// medians.
type suite struct {
	name      string // what -only matches
	broker    string // the table's first column
	pkg       string
	bench     string // the -bench pattern
	benchtime string // the -benchtime; most benchmarks size their rounds themselves at 1x
}

var suites = []suite{
	{"memory-router", "memory", "./bench", "^Benchmark(PerKeyConcurrency|RecommendedStack)$", "1x"},
	{"memory-stores", "memory/Redis/PostgreSQL", "./bench", "^Benchmark(DedupeCost|ParkingCost)$", "1x"},
	{"memory-telemetry", "memory", ".", "^BenchmarkTelemetryOverhead$", "1x"},
	{"redis", "Redis Streams", "./transport/redisstream", "^Benchmark(PublishVsRaw|ConsumeVsRaw|ConsumeVsWatermill)$", "1x"},
	{"rabbitmq", "RabbitMQ", "./transport/rabbitmq", "^Benchmark(EndToEndRatio|PublishVsRaw|ConsumeVsRaw)$", "1x"},
	{"mqtt", "MQTT 3.1.1", "./transport/mqtt", "^Benchmark(EndToEnd311|Publish311|PublishAsync311|Drain311)$", "50000x"},
	{"mqtt5", "MQTT 5", "./transport/mqtt", "^Benchmark(PublishOneAtATime|Publish|PublishAsync|Drain)$", "20000x"},
	{"jetstream", "NATS JetStream", "./transport/jetstream", "^Benchmark(PublishVsRaw|ConsumeVsRaw)$", "1x"},
	{"kafka", "Kafka (kfake)", "./transport/kafka", "^BenchmarkKafka$", "200000x"},
	{"sqs", "SQS (fauxqs)", "./transport/sqs", "^Benchmark(PublishVsRaw|ConsumeVsRaw)$", "1x"},
	{"watermill", "Watermill bridge", "./transport/watermill", "^BenchmarkHandlerBridgeVsRedisstream$", "1x"},
	{"rabbitmq-watermill", "RabbitMQ (watermill-amqp)", "./bench", "^BenchmarkRabbitMQVsWatermill$", "1x"},
	{"rabbitmq-settings", "RabbitMQ (raw amqp091-go)", "./bench", "^BenchmarkRabbitMQ(ConfirmWindow|Prefetch)$", "1x"},
	{"kafka-settings", "Kafka (kfake, linger)", "./bench", "^BenchmarkKafkaLinger$", "1x"},
	{"redis-settings", "Redis (appendfsync)", "./transport/redisstream", "^BenchmarkPublishAppendfsync$", "1x"},
}

// result is one benchmark line of go test's output.
type result struct {
	name    string
	metrics []metric
}

type metric struct {
	unit  string
	value float64
}

func main() {
	only := flag.String("only", "", "run only the suites whose name contains this")
	timeout := flag.Duration("timeout", 15*time.Minute, "the deadline of each suite's go test run")
	verbose := flag.Bool("v", false, "copy go test's output to stderr")
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	load := loadAverage()
	start := time.Now()
	var rows []string
	failed := false
	for _, s := range suites {
		if *only != "" && !strings.Contains(s.name, *only) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s (%s -bench %s)\n", s.name, s.pkg, s.bench)
		res, out, err := run(root, s, *timeout)
		if *verbose || err != nil {
			os.Stderr.Write(out)
		}
		if err != nil {
			failed = true
			rows = append(rows, fmt.Sprintf("| %s | %s | failed: %v | |", s.broker, s.pkg, err))
			continue
		}
		for _, r := range res {
			rows = append(rows, fmt.Sprintf("| %s | `%s` | %s | %s |", s.broker, r.name, figures(r, true), figures(r, false)))
		}
	}
	fmt.Printf("Run %s, %d CPUs (%s), %s, load average before: %s; took %s.\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOARCH, runtime.Version(), load, time.Since(start).Round(time.Second))
	fmt.Println("| Broker | Benchmark | Ratios (median of per-round ratios) | Rates (medians) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
	if failed {
		os.Exit(1)
	}
}

// run runs one suite and parses its benchmark lines.
func run(root string, s suite, timeout time.Duration) ([]result, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", s.bench,
		"-benchtime", s.benchtime, "-count", "1", "-timeout", timeout.String(), s.pkg)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	raw := out.Bytes() // before parse reads the buffer
	res := parse(bytes.NewReader(raw))
	if err == nil && len(res) == 0 {
		err = fmt.Errorf("no benchmark ran (a broker missing? set FERRY_REQUIRE_BROKERS=1 to fail instead of skip)")
	}
	return res, raw, err
}

// parse reads go test -bench output: "BenchmarkX-2  1  123 ns/op  4.5 unit ...".
func parse(r io.Reader) []result {
	var res []result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		r := result{name: name}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			r.metrics = append(r.metrics, metric{f[i+1], v})
		}
		res = append(res, r)
	}
	return res
}

// isRatio tells a ratio unit ("ferry/raw") from a rate or a cost
// ("msgs/s", "cpu-µs/msg", "ns/op").
func isRatio(unit string) bool {
	if !strings.Contains(unit, "/") {
		return false
	}
	for _, suffix := range []string{"/s", "/op", "/msg", "/item"} {
		if strings.HasSuffix(unit, suffix) {
			return false
		}
	}
	return true
}

// figures formats a result's ratios (ratios true) or its other metrics,
// leaving out go test's ns/op, which for these benchmarks times the whole
// run rather than one operation, and a MB/s of 0 (no SetBytes).
func figures(r result, ratios bool) string {
	var parts []string
	for _, m := range r.metrics {
		if m.unit == "ns/op" || (m.unit == "MB/s" && m.value == 0) || isRatio(m.unit) != ratios {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", format(m.value), m.unit))
	}
	return strings.Join(parts, ", ")
}

func format(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// moduleRoot is the directory of Ferry's go.mod (this command may be run
// from anywhere inside the module).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run inside Ferry's module")
	}
	return strings.TrimSuffix(gomod, "/go.mod"), nil
}

// loadAverage is the 1, 5 and 15 minute load averages, where the system
// tells them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
