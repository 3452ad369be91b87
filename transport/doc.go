// Package transport is the service-provider interface between Ferry and a
// broker. Applications use package ferry (the Router) and [Open]; this
// package is for transport authors, and for programs that publish.
//
// A transport implements [Publisher] and [Subscriber] (together, a
// [Transport]), registers an [Opener] for its URL scheme from init, in the
// database/sql driver style, and declares its [Semantics] on every [Stream].
// Optional capabilities are small extra interfaces found by type assertion:
// [BatchPublisher], [AsyncPublisher] (a pipelined publish window),
// [Declarer], [DLQNamer], [Extender] on a Delivery, [DeadLetters] and
// [LagReporter] on a Transport.
//
// The contract, in one place:
//
//   - Publish returns only when the broker confirmed the write; a possibly
//     written message is reported with [ErrUnknownOutcome], never as a plain
//     failure. It refuses, with [ErrInvalidMessage], a message its own
//     consumer would not return byte for byte, and never rewrites one.
//   - A Stream's Receive is called from one goroutine; deliveries come in
//     broker order. Each [Delivery] is settled exactly once, with Ack or Nack;
//     a second settle returns [ErrSettled].
//   - Ack is per message here; the transport coalesces broker calls behind it
//     (one XACK for many IDs, one offset commit per partition per interval)
//     and flushes on Close. A crash inside the window redelivers, never loses.
//     Log transports commit only the contiguous prefix of finished offsets.
//   - Closing a stream releases its unsettled deliveries for redelivery.
//   - A transport never retries a handler and never loops on a broker error:
//     it returns a wrapped error and its caller owns the backoff.
//
// The conformance suite in package transporttest proves a transport keeps
// this contract and what its Semantics declare.
//
// # Writing a transport
//
// Every transport package has the same shape, so that a reader who knows
// one knows them all:
//
//   - const Scheme, registered from init with an [Opener] that calls New
//     with the URL: transport.Open(ctx, url) and New parse the same way.
//   - func New(ctx context.Context, rawURL string, opts ...Option)
//     (*Transport, error). rawURL is the transport's URL, read with
//     [ParseURL] (and [HostPort] where it names one server); its query keys
//     map one to one onto Options, listed once as a table of [Key] and read
//     with [ParseQuery] and [Options] (one rule for every transport: each
//     key once, every key known). opts apply after the
//     URL's, so code overrides text. New validates everything and returns an
//     error wrapping [ErrInvalidOption] naming the option; nothing is
//     reported later. ctx bounds the connection; every network call also
//     has a default deadline of its own.
//   - type Option interface{ apply(*config) }: sealed, made only by the
//     package's functions. WithLogger(*slog.Logger) is spelled the same in
//     every package; the default is slog.Default().
//   - Subscription.Options are read with [OptionsQuery], under the same
//     rule as URL keys.
//   - Security is spelled one way: TLS files with the keys tls_ca,
//     tls_cert and tls_key ([Query.TLSFiles], read into a tls.Config by
//     [TLSFiles.Config]), tls_insecure to skip the certificate check of a
//     test broker, and credentials over a connection without TLS refused
//     unless the URL says allow_plaintext_auth=true.
//   - Files follow the goroutines: options.go and url.go for configuration,
//     one file for the publish path, one per receive or settle loop, dlq.go
//     for [DeadLetters], lag.go for [LagReporter].
//   - Coalescing (acks, publish batches) goes through the one batcher,
//     internal/batch.
//   - A dead letter the transport writes itself (a poison record, a
//     delivery limit) is built with [NewDeadLetter] and
//     [DeadLetter.Message]; the DLQ is named by [DLQName].
//   - Errors name the operation and the resource ("kafka: publish orders:
//     ..."), wrap the package's sentinels, which wrap this package's
//     ([ErrRevoked], [ErrUnknownOutcome], [ErrTooLarge],
//     [ErrInvalidMessage]), and print URLs
//     only through [Redact].
//   - No package state beyond the registration.
package transport
