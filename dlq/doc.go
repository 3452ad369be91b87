// Package dlq holds the operator's dead-letter operations, on any transport
// that implements [transport.DeadLetters]: list the dead letters of a
// consumer group with their failure records parsed, and replay a selection
// to its original topic or another.
//
// It is the library under the ferry command's dlq subcommands, for programs
// that do the same from Go. Dead letters are written by the dead-letter
// middleware (package middleware) and by transports that dead-letter by
// themselves; every one carries a [transport.DeadLetter] record, read back
// here with [transport.ReadDeadLetter]. The DLQ of a group on a transport is
// named by [transport.DLQName].
//
// Replay is at-least-once and safe to repeat: a message is removed from the
// DLQ only after its publish is confirmed, and it keeps its ID, so a
// consumer that dedupes applies it once however many times it is replayed.
package dlq
