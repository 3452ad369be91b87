// Package doccheck holds the test that keeps the code in README.md and
// docs/ true: what a user copies must work as copied.
//
// Every ```go block in a Markdown file of the repository is one of two
// kinds:
//
//   - A whole program (it starts with "package main"). The test writes it
//     into a new module that requires this one (replaced by the working
//     tree), builds it, and runs it. The fence's info string says how:
//     "go" runs it to completion; "go serve" runs it until its output holds
//     the expected lines, then interrupts it (SIGINT) and expects a clean
//     exit, as a service would. The expected output is the ```text block
//     that follows the program, if any: each of its lines must appear in
//     the program's output, in any order (concurrent handlers finish in
//     any order). A program whose fence also says
//     "postgres" ("go postgres") needs PostgreSQL: the test skips it when
//     the server is unreachable (fails with FERRY_REQUIRE_BROKERS=1), and
//     runs it with FERRY_POSTGRES_URL set.
//   - A fragment (anything else). Each of its paragraphs (lines between
//     blank lines; comment lines aside) must appear, line for line after
//     trimming indentation, in one of the repository's _test.go files, where
//     go test compiles it and, in an Example with // Output:, runs it, or in
//     a whole program of the same page (a step of the program the page
//     builds up to), which the test builds and runs; an `import _ "p"` line
//     matches the `_ "p"` of an import block. So a fragment cannot drift
//     from code that is tested.
//
// The page docs/choosing-a-broker.md holds a table of what each transport
// declares; TestChoosingABrokerTable renders it from the transports and
// fails when the page differs.
package doccheck
