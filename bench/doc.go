// Command bench runs Ferry's comparative benchmarks and prints one
// Markdown table: for each broker, the raw client against Ferry (and
// Watermill's adapter where one exists), publish, consume and end to end,
// plus the Router-level cases (per-key concurrency, the recommended stack
// on memory, dedupe and parking costs).
//
//	go run ./bench                # everything, about 10 minutes on 2 cores
//	go run ./bench -only memory   # the suites whose name contains "memory"
//
// It does not copy the per-transport benchmarks: it runs each package's
// own BenchmarkXxxVsRaw (interleaved rounds, medians of per-round ratios,
// computed in the package) with go test -bench and reads the metrics they
// report. The Router-level cases no package holds live in this package's
// test files (cases_test.go) and are run the same way. docs/performance.md
// publishes the latest table and the method.
package main
