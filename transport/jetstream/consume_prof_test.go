package jetstream_test

import (
	"fmt"
	"runtime"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/ferrymq/ferry/internal/benchstat"
)

// BenchmarkConsumeAllocs consumes pre-filled streams with raw nats.go
// Consume, a Ferry Router and the transport's Receive loop, in
// interleaved rounds (the order rotated), and reports each one's heap
// allocations and CPU µs per message (the process's, the server's not
// counted), with the median of the per-round CPU ratios to raw.
func BenchmarkConsumeAllocs(b *testing.B) {
	requireShared(b)
	n := max(b.N/benchRounds, 20000)
	_, js := rawConn(b, sharedURL)
	allocs := map[string][]float64{}
	cpus := map[string][]float64{}
	measure := func(name string, run func() benchstat.Spent) {
		_, cpu, al := run().PerMsg(n)
		allocs[name] = append(allocs[name], al)
		cpus[name] = append(cpus[name], cpu)
	}
	for r := range benchRounds {
		topic := uniq(b, fmt.Sprintf("bench-allocs-%d", r))
		cleanupStream(b, sharedURL, topic)
		fill(b, js, topic, n)
		runs := []func(){
			func() { measure("raw", func() benchstat.Spent { return consumeRaw(b, js, topic, n) }) },
			func() { measure("ferry", func() benchstat.Spent { return consumeFerry(b, topic, n) }) },
			func() { measure("stream", func() benchstat.Spent { return consumeStream(b, topic, n) }) },
		}
		for i := range runs {
			runs[(i+r)%len(runs)]()
		}
	}
	for name, xs := range allocs {
		b.ReportMetric(benchstat.Median(xs), name+"-allocs/msg")
		b.ReportMetric(benchstat.Median(cpus[name]), name+"-cpu-µs/msg")
		if name == "raw" {
			continue
		}
		ratio := make([]float64, len(xs))
		for i := range ratio {
			ratio[i] = cpus[name][i] / cpus["raw"][i]
		}
		b.ReportMetric(benchstat.Median(ratio), name+"/raw-cpu")
		b.Logf("%s CPU µs/msg by round %.2f, raw %.2f", name, cpus[name], cpus["raw"])
	}
}

// BenchmarkConsumeOnly consumes a pre-filled stream with one contender
// alone (raw Consume, a Ferry Router, the transport's Receive loop), for
// profiling its path: -bench 'ConsumeOnly/ferry' -cpuprofile.
func BenchmarkConsumeOnly(b *testing.B) {
	requireShared(b)
	for _, c := range []struct {
		name string
		run  func(b *testing.B, js njs.JetStream, topic string, n int) benchstat.Spent
	}{
		{"raw", consumeRaw},
		{"ferry", func(b *testing.B, _ njs.JetStream, topic string, n int) benchstat.Spent {
			return consumeFerry(b, topic, n)
		}},
		{"stream", func(b *testing.B, _ njs.JetStream, topic string, n int) benchstat.Spent {
			return consumeStream(b, topic, n)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := max(b.N, 50000)
			_, js := rawConn(b, sharedURL)
			topic := uniq(b, "bench-only-"+c.name)
			cleanupStream(b, sharedURL, topic)
			fill(b, js, topic, n)
			runtime.GC()
			b.ResetTimer()
			_, cpu, _ := c.run(b, js, topic, n).PerMsg(n)
			b.ReportMetric(cpu, "cpu-µs/msg")
		})
	}
}
