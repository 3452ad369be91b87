// Command ferry is the operator's command for Ferry services: dead
// letters, parked keys, lag, offsets, publish, tail and the declared
// semantics, on every transport, by URL.
//
//	go install github.com/ferrymq/ferry/cmd/ferry@latest
//
// The broker is a URL (--url or FERRY_URL), the parking lot a DSN
// (--parking or FERRY_PARKING). Output is a table, or JSON with -o json.
// Exit codes: 0 done, 1 failed, 2 bad usage. See docs/operations.md.
package main
