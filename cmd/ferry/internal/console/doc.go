// Package console serves the ferry console: one web page, embedded in the
// binary, over the same operations as the ferry command. It shows each
// subscription's lag and throughput as small live charts, the dead letters
// of each group (with their failure record, headers and payload as text)
// and replays them, lists the parked keys and asks the running consumers to
// release them in order or drops them with an audit record, and shows the
// declared semantics of the transport in use.
//
// The server knows nothing of brokers: it calls the operations through
// small interfaces ([Monitor], [DeadLetters], [Lot], and [Inbox] from
// [InboxOf]), the first three of which
// [Operations] implements with the ferry command's operations layer
// (package ops), so the page and the shell do the same thing: a replay is
// ops.ReplayDLQ, a release is ops.RequestRelease (recorded in the lot and
// carried out, in order, by the running consumers' middleware.Park), a
// drop is ops.DropParked with its audit record.
//
// The server reads each group every Config.Interval into a ring buffer of
// Config.History. Throughput is the change between readings of a count
// that only grows, from a transport that counts what a group consumed
// ([ops.Counter]: memory, Kafka, JetStream, Redis Streams); the page shows
// the messages consumed in the last minute and five, and says per group
// what the broker's lag and throughput are and what it cannot tell
// ([ops.Measures]: RabbitMQ, SQS and MQTT count nothing). With an [Inbox]
// (ferry console --inbox) it shows a dedupe inbox's records per
// namespace, its stuck claims, and whether a message ID was processed.
//
// # Security
//
//   - The server listens on loopback by default. On loopback every request
//     must name a loopback host in its Host header (a page of another site
//     that rebinds its DNS name to 127.0.0.1 is refused).
//   - Listening anywhere else, a write action (replay, release, drop)
//     needs the operator token (Config.Token, from --token or
//     FERRY_CONSOLE_TOKEN) in the X-Ferry-Token header; without a
//     configured token the console is read-only there.
//   - Every write is a POST with a JSON body and the per-process CSRF token
//     (from GET /api/session) in the X-Ferry-CSRF header; a cross-site
//     Origin or Sec-Fetch-Site is refused.
//   - The page renders every payload, header and error as text (DOM
//     textContent, never HTML), under a Content-Security-Policy that allows
//     only the console's own script and style.
//   - The broker URL is shown redacted ([transport.Redact]); every error
//     text sent to the page has Config.Secrets (the passwords of the URLs)
//     replaced.
package console
