// Package claims keeps the transport pages honest: every statement on a
// docs/transports page names the test that proves it, or says that it is
// the broker's documentation (or a design choice, not a behaviour), and
// every test a page names exists. Its test, TestTransportPages, is the one
// check of every page; no transport package has a copy of its own.
//
// # The rule
//
// A page is read as blocks: paragraphs, list items, quotes and table body
// rows. Headings and code blocks are not statements (package doccheck runs
// the code). Each block must carry at least one of:
//
//   - a test reference: a code span naming a test, example, benchmark or
//     fuzz target, with an optional subtest path, such as
//     `TestConformance/Ordering/PerKey` or `ExampleNew_rawDevices`;
//   - the words "broker documentation" (or the broker's or client's name
//     before "documentation": "Redis documentation"), for what the broker
//     does by its own documentation and Ferry does not change;
//   - "(design)" or "(design: …)", for a choice or advice that is not a
//     behaviour a test could prove (why Ferry does something, what to
//     prefer).
//
// A paragraph that ends with a colon and leads into a list, table or code
// block is exempt: its statements are in what follows. If it carries a
// proof itself, the items of the list or the rows of the table it leads
// into share it ("All broker documentation:", "TestFanoutFilter checks
// each:").
//
// A reference exists when a _test.go file of the module defines the
// function, and each segment of its subtest path is a string literal of
// the module's Go sources (a suite case such as "Ordering/PerKey", a
// table entry such as "Sharded"), as go test names subtests.
package claims
