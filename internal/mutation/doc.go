// Package mutation proves that the core's tests can fail. It holds no code
// that other packages use, only its tests: the mutation kit.
//
// A test that cannot fail proves nothing. Each mutant is one bug a change
// could bring in, written as a source edit: in one file of one package, an
// exact snippet (which must occur in the file exactly once) and its
// replacement. TestMutants writes the mutated file to a temporary
// directory, points `go test -overlay` at it to build the package's test
// binary, and runs the named test in it, in a child process and in the
// package's directory, as go test would:
//
//	go test -c -o <bin> -overlay=<json> <package>
//	<bin> -test.run=<Run>
//
// The child must fail, and its output must show the mutant's Want text: the
// test failed for the bug, not for something else (a build error fails the
// kit, loudly). The same test in the package's unmutated binary, the
// control, must pass. Nothing in the production code knows about the kit:
// no hooks, no build tags; the overlay replaces the file for the child's
// build only.
//
// A snippet that no longer occurs exactly once (the code moved on) fails
// the kit with a message naming the mutant, so the kit cannot rot into
// mutants that mutate nothing. Fix the snippet to the new code, keeping the
// bug the same.
//
// Builds use the CPU and runs mostly wait, so the kit bounds each by
// GOMAXPROCS on its own: a mutant's run never holds up the next build. A
// package's control binary is built once for all its controls, and its
// compiled packages come from the build cache; each mutant's build
// recompiles only the mutated package and those above it. Each run is one
// narrow test, so that the kit fits in CI's two minutes on two cores.
// Children run with FERRY_REQUIRE_BROKERS=1, so that a test cannot pass by
// skipping; a mutant whose Requires finds its broker unreachable is skipped
// (failed under FERRY_REQUIRE_BROKERS=1). -short skips the kit.
//
// A plain `go test ./...` (and so CI) runs the core's group, which must
// fit CI's two minutes (it took 127 s with the batch group beside it, so
// that one runs on demand too). The batch group and each transport's
// (kafka, rabbitmq, redisstream, sqs, sns, mqtt, forward, jetstream,
// console, parkwatch, dedupe) need minutes of builds (about twenty minutes for all of them on this project's loaded
// two-core machine), more than CI's
// budget; run them on demand, all or some:
//
//	FERRY_REQUIRE_BROKERS=1 FERRY_MUTANTS=all go test -count=1 -timeout 2h ./internal/mutation/
//	FERRY_REQUIRE_BROKERS=1 FERRY_MUTANTS=kafka,sqs go test -count=1 ./internal/mutation/
//
// # Adding mutants
//
// The core's mutants are in core_test.go, one [Mutant] literal each (see
// its fields in kit_test.go). A transport's mutation coverage (issue 18)
// goes in a file of its own here, kafka_test.go say, which registers its
// mutants from init:
//
//	func init() {
//		register("kafka", []Mutant{{
//			Name:    "commit-before-handle",
//			Pkg:     "./transport/kafka",
//			File:    "transport/kafka/consumer.go",
//			Find:    "...",     // exactly once in the file
//			Replace: "...",
//			Run:     "^TestConformance$/^Ack$",
//			Want:    "was acked before the consumer left",
//			Requires: func(tb testing.TB) { transporttest.RequireBroker(tb, "kafka", addr) },
//		}})
//	}
//
// Mutants are named "<group>/<name>", so `go test -run
// 'TestMutants/kafka/'` runs one transport's. Edits that need a second
// change to compile (an import the mutated code no longer uses) list it in
// More, in the same file or another of the same package.
package mutation
