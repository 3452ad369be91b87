// Package profiles holds the table of broker profiles that package
// ferrytest simulates: for each transport of this module, the
// transport.Semantics it declares with its default configuration, and the
// URL and subscription that make it declare them.
//
// The table is a copy of what each transport declares, kept so that
// ferrytest needs no broker and compiles no broker client. Its test
// (drift_test.go) opens every row's URL with the real transport, compares
// what it declares with the row field by field, and fails for a
// registered scheme without a row: the copy cannot drift.
package profiles
