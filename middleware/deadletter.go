package middleware

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/telemetry"
	"github.com/ferrymq/ferry/transport"
)

// DefaultPublishFailureDelay is the Nack delay [DeadLetter] asks for when
// the DLQ publish fails; see [PublishFailureDelay].
const DefaultPublishFailureDelay = time.Second

// ErrDeadLetter is wrapped by the error [DeadLetter] returns when the DLQ
// publish was not confirmed. The original message is then not acked: the
// Router Nacks it (after [PublishFailureDelay]) and it comes back, so nothing
// is lost. If the outcome was unknown (errors.Is(err,
// transport.ErrUnknownOutcome)) the DLQ may hold a copy already; DLQ replay
// keeps the ID, so dedupe absorbs the duplicate. Read the details with
// errors.As and *[DeadLetterError].
var ErrDeadLetter = errors.New("middleware: dead-letter publish failed")

// DeadLetterError is the error behind [ErrDeadLetter].
type DeadLetterError struct {
	DLQ   string // the DLQ the message was to go to
	Err   error  // the publish error
	Cause error  // the handler's error that made the message a dead letter
}

// Error names the DLQ and both errors.
func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("middleware: dead-letter to %q not confirmed: %v (handler error: %v)", e.DLQ, e.Err, e.Cause)
}

// Unwrap returns the publish error and the handler's error.
func (e *DeadLetterError) Unwrap() []error { return []error{e.Err, e.Cause} }

// Is reports whether target is [ErrDeadLetter].
func (e *DeadLetterError) Is(target error) bool { return target == ErrDeadLetter }

type deadLetterConfig struct {
	optionError
	dlq          string
	deferNative  bool
	failureDelay time.Duration
	onDeadLetter func(dlq string, m *handler.Message, err error)
}

// DLQ sets the DLQ's name (the topic, queue or stream dead letters are
// published to) for every message, overriding the default: the DLQ the
// transport names for the subscription's group ([transport.DLQName], which
// the Router passes in [transport.StreamInfo]; "<group>.dlq" on most
// transports).
func DLQ(name string) DeadLetterOption {
	return deadLetterOption(func(c *deadLetterConfig) {
		if name == "" {
			c.failf("DLQ(\"\"): want a name")
			return
		}
		c.dlq = name
	})
}

// DeferToNative makes [DeadLetter] leave dead-lettering to the broker where
// the stream's declared [transport.Semantics] (passed by the Router in the
// handler's context) say NativeDLQ: SQS with a redrive policy, RabbitMQ quorum queues with a DLX
// and x-delivery-limit. DeadLetter then returns the handler unchanged; a
// message that still fails after [Retry] is Nacked, and the broker moves it
// to its DLQ when its delivery count reaches the broker's limit. The native
// DLQ keeps the original message but not the handler's error: SQS keeps
// none of Ferry's failure headers, and the RabbitMQ transport adds a
// generic record (a delivery-limit error text, attempts, times) next to the
// broker's x-death. Where the transport declares no native DLQ, or outside
// a Router, the option changes nothing: the middleware publishes to its
// built DLQ (so p must then not be nil).
//
// RabbitMQ does not need it: there DeadLetter's default publish already
// lands in the native DLQ, with the handler's error (see the package doc,
// "Which broker dead-letters how").
//
// Set the broker's limit above Retry's budget, or the broker dead-letters
// before Retry gives up.
func DeferToNative() DeadLetterOption {
	return deadLetterOption(func(c *deadLetterConfig) { c.deferNative = true })
}

// PublishFailureDelay sets the Nack delay [DeadLetter] asks the Router for
// when the DLQ publish fails, overriding the default of 1s
// ([DefaultPublishFailureDelay]), so that a DLQ outage does not make the
// message loop hot. Brokers that cannot delay a Nack redeliver at once.
func PublishFailureDelay(d time.Duration) DeadLetterOption {
	return deadLetterOption(func(c *deadLetterConfig) {
		if d < 0 {
			c.failf("PublishFailureDelay(%s): want 0 or more", d)
			return
		}
		c.failureDelay = d
	})
}

// OnDeadLetter registers fn, called after each confirmed DLQ publish with
// the DLQ's name, the dead letter as published (headers included) and the
// handler's error (for logs, alerts and the DLQ depth metric). It must not
// keep or modify the message.
func OnDeadLetter(fn func(dlq string, m *handler.Message, err error)) DeadLetterOption {
	return deadLetterOption(func(c *deadLetterConfig) { c.onDeadLetter = fn })
}

// DeadLetter returns a middleware that publishes a message its handlers
// failed to the subscription's DLQ with p, and then reports success, so that
// the Router acks the original: the failure is recorded, the message is kept,
// and the subscription moves on. The DLQ is the one the transport names
// for the subscription's group ([transport.DLQName]; "<group>.dlq" on most
// transports) unless [DLQ] names another: the built DLQ of transports
// without a native one (a Kafka topic, a Redis stream, an MQTT topic), and
// the native DLQ where the transport routes both there. Every DLQ can be
// listed and replayed under that name through [transport.DeadLetters].
//
// The dead letter keeps the original's ID, Key, Payload and Headers byte for
// byte, and adds the [transport.DeadLetterHeaders]: the error text (with the
// stack of a panic, up to 4 KiB), the error's [handler.Class], the attempts
// made, the subscription, the original topic, partition, offset and broker
// ID, and the first and last failure time (RFC 3339, UTC, nanoseconds).
// Attempts and times come from [Retry]'s [ExhaustedError] when Retry is
// inside; without Retry the message is dead-lettered after one attempt.
//
// The original is acked only once p confirmed the publish. If the publish
// fails, DeadLetter returns an error wrapping [ErrDeadLetter] (with a
// [PublishFailureDelay] RetryAfter) and the Router Nacks: the message comes
// back and is handled again. Nothing is lost; at worst the DLQ holds a
// duplicate with the same ID.
//
// A refusal for size is not such a failure: the record's headers (about
// ten, the error text among them) can push a message near the broker's
// limit over it (SQS counts attributes; Kafka's max.message.bytes the
// whole record), and handing it back would run its handlers again on
// every redelivery. When p refuses the dead letter with an error wrapping
// [transport.ErrTooLarge], DeadLetter publishes it with its payload cut to
// fit instead, marked [transport.HeaderTruncated] with the original's size
// ([transport.HeaderOriginalSize]) and SHA-256
// ([transport.HeaderOriginalSHA256]), and logs a warning; the original is
// acked. The first cut takes off the record's bytes and 1 KiB; each
// further one keeps a quarter, down to no payload, and then the error text
// is cut to 1 KiB. Recover the whole payload from the source where it keeps
// it (the record names its topic, partition and offset). A message that
// carries HeaderTruncated (such a dead letter, replayed) never reaches the
// handlers: it fails at once with a permanent error wrapping
// [ErrTruncated] and is dead-lettered again.
//
// DeadLetter lets three kinds of error through untouched: a hand-back for
// delayed redelivery ([ErrRedeliver], from [Redeliver]), a misordered chain
// ([ErrMisordered]), and any error once the call's ctx has ended (the
// Router's drain deadline: the message will be redelivered, not
// dead-lettered).
//
// Place it outermost: outside [Retry], so that it sees only the final
// error; outside [Dedupe], so that a dead-lettered message is released,
// not remembered as done (its replay from the DLQ would be skipped);
// outside [Timeout] and [Recover], so that a message that timed out or
// panicked is dead-lettered rather than redelivered for ever. On ordered
// subscriptions [Park] takes the failures of keyed messages, so that a key
// cannot overtake its poison message: put DeadLetter outside Park (it then
// dead-letters keyless messages only). Inside any of them, or inside
// another DeadLetter, it reports [ErrMisordered] at the first message. It
// returns an error wrapping [ErrInvalidOption] if p is nil or an option is
// invalid.
func DeadLetter(p transport.Publisher, opts ...DeadLetterOption) (handler.Middleware, error) {
	c := deadLetterConfig{failureDelay: DefaultPublishFailureDelay}
	for _, o := range opts {
		if o != nil {
			o.applyDeadLetter(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	if p == nil && !c.deferNative {
		return nil, fmt.Errorf("%w: DeadLetter needs a publisher for the DLQ", ErrInvalidOption)
	}
	return func(next handler.Handler) handler.Handler {
		return &deadLetterHandler{next: next, to: linkTo(next, layerDeadLetter), pub: p, cfg: c}
	}, nil
}

// ErrNoDLQ is wrapped by the error [DeadLetter] returns for a failed message
// when it has no publisher ([DeferToNative] with a nil one) and the stream
// declares no native DLQ. The message is not acked: the Router Nacks it
// after [MisorderedDelay], and the error is logged once. Give DeadLetter a
// publisher, or run the subscription on a transport with a native DLQ.
var ErrNoDLQ = errors.New("middleware: no DLQ for this stream")

// layerDeadLetter marks DeadLetter in the chain's scope (see order.go).
const layerDeadLetter layer = 1 << 18

type deadLetterHandler struct {
	next  handler.Handler
	to    link
	pub   transport.Publisher
	cfg   deadLetterConfig
	mis   misorder
	noDLQ sync.Once
	// scopes makes the scope of each message: DeadLetter is the
	// outermost middleware of this package where it is right.
	scopes slabs[scope]
}

func (h *deadLetterHandler) Handle(ctx context.Context, m *handler.Message) error {
	ctx, c := begin(ctx, &h.scopes)
	return h.serve(ctx, m, c)
}

func (h *deadLetterHandler) serve(ctx context.Context, m *handler.Message, c call) error {
	if c.outer != 0 {
		return h.mis.report(h.cfg.logger(), deadLetterMisorder(c.outer), m)
	}
	var err error
	if m.Header(transport.HeaderTruncated) != "" {
		err = truncatedError(m)
	} else if err = c.pass(ctx, m, &h.to); err == nil {
		return nil
	}
	if ctx.Err() != nil || errors.Is(err, ErrRedeliver) || errors.Is(err, ErrMisordered) {
		return err
	}
	if h.cfg.deferNative {
		if s, ok := transport.SemanticsFromContext(ctx); ok && s.NativeDLQ {
			telemetry.Event(ctx, "dead_letter_deferred", attribute.String("ferry.error.class", handler.Class(err)))
			return err // the broker dead-letters at its delivery limit
		}
		if h.pub == nil {
			h.noDLQ.Do(func() {
				h.cfg.logger().Error("middleware: dead-letter: DeferToNative without a publisher on a stream with no native DLQ; failed messages are redelivered, not dead-lettered",
					"id", m.ID, "subscription", m.Facts().Subscription)
			})
			return handler.RetryAfter(fmt.Errorf("%w: %w", ErrNoDLQ, err), MisorderedDelay)
		}
	}
	dlq := h.cfg.dlq
	if dlq == "" {
		dlq = defaultDLQ(ctx, m)
	}
	dl, perr := publishDeadLetter(ctx, h.pub, deadLetterOf(m, dlq, err, time.Now()), h.cfg.logger())
	if perr != nil {
		return handler.RetryAfter(&DeadLetterError{DLQ: dlq, Err: perr, Cause: err}, h.cfg.failureDelay)
	}
	telemetry.Mark(ctx, telemetry.OutcomeDeadLetter, err, attribute.String("ferry.dlq", dlq))
	f := m.Facts()
	h.cfg.logger().Warn("middleware: dead-letter: message dead-lettered; the Router acks it",
		append([]any{"dlq", dlq, "subscription", f.Subscription, "group", f.Group, "topic", m.Topic, "id", m.ID, "key", m.Key,
			"attempt", dl.Headers[transport.HeaderAttempts], "class", handler.Class(err), "err", err.Error()}, telemetry.LogArgs(ctx)...)...)
	if h.cfg.onDeadLetter != nil {
		h.cfg.onDeadLetter(dlq, dl, err)
	}
	return nil
}

// ErrTruncated is wrapped by the permanent error [DeadLetter] gives a
// message that carries [transport.HeaderTruncated]: a dead letter whose
// payload was cut to fit its DLQ, replayed from there. Its payload is not
// the original, so its handlers are not called: it is dead-lettered again,
// still marked. Recover the original (see transport.HeaderTruncated) and
// publish that instead.
var ErrTruncated = errors.New("middleware: dead-letter: payload was truncated when dead-lettered")

func truncatedError(m *handler.Message) error {
	return handler.Permanent(fmt.Errorf("%w: message %s carries the first %d of %s bytes of its payload (SHA-256 %s); its handlers were not called",
		ErrTruncated, m.ID, len(m.Payload), m.Header(transport.HeaderOriginalSize), m.Header(transport.HeaderOriginalSHA256)))
}

// Bounds of a truncated dead letter; see publishDeadLetter.
const (
	// truncationSlack is what the first truncated copy leaves below the
	// original's size beyond the bytes of the failure record: brokers count
	// headers and framing in their own ways (SQS attribute types, base64
	// for a binary body, Kafka record varints).
	truncationSlack = 1 << 10
	// minTruncated is the shortest payload prefix worth keeping; below it
	// the copy goes without a payload.
	minTruncated = 256
	// maxTruncatedError bounds the error text of a dead letter that is too
	// large even without its payload.
	maxTruncatedError = 1 << 10
)

// publishDeadLetter publishes the dead letter dl with p and returns what
// was published. If the broker refuses it as too large (an error wrapping
// [transport.ErrTooLarge]: the failure record pushed a message near the
// limit over it), it publishes a copy whose payload is cut to fit, marked
// with the truncation record (transport.HeaderTruncated, the original
// size and SHA-256), and logs a warning: a dead letter is never refused for
// its size alone, so the message is never redelivered for ever. The first
// cut takes off the record's bytes and a slack; each further one keeps a
// quarter, down to no payload at all, and then the error text is cut to
// 1 KiB. Only a copy refused even so, or any other publish error, is
// returned as an error.
func publishDeadLetter(ctx context.Context, p transport.Publisher, dl *handler.Message, log *slog.Logger) (*handler.Message, error) {
	err := p.Publish(ctx, dl)
	if err == nil || !errors.Is(err, transport.ErrTooLarge) {
		return dl, err
	}
	refused := err
	full := dl.Payload
	c := &handler.Message{ID: dl.ID, Key: dl.Key, Topic: dl.Topic, Headers: maps.Clone(dl.Headers)}
	if c.Headers[transport.HeaderTruncated] == "" { // else a replayed truncated copy: keep the first record
		sum := sha256.Sum256(full)
		c.Headers[transport.HeaderTruncated] = "true"
		c.Headers[transport.HeaderOriginalSize] = strconv.Itoa(len(full))
		c.Headers[transport.HeaderOriginalSHA256] = hex.EncodeToString(sum[:])
	}
	record := 0
	for _, keys := range [][]string{transport.DeadLetterHeaders, {transport.HeaderTruncated, transport.HeaderOriginalSize, transport.HeaderOriginalSHA256}} {
		for _, k := range keys {
			record += len(k) + len(c.Headers[k])
		}
	}
	n := max(len(full)-record-truncationSlack, 0)
	for cutError := false; ; {
		if n < minTruncated {
			n = 0
		}
		c.Payload = full[:n:n]
		if err = p.Publish(ctx, c); err == nil {
			log.Warn("middleware: dead-letter: the DLQ refused the dead letter as too large; dead-lettered it with its payload truncated",
				"dlq", c.Topic, "id", c.ID, "key", c.Key, "original_size", len(full), "kept", n,
				"sha256", c.Headers[transport.HeaderOriginalSHA256], "err", refused)
			return c, nil
		}
		switch {
		case !errors.Is(err, transport.ErrTooLarge):
			return dl, err
		case n > 0:
			n /= 4
			continue
		case !cutError && len(c.Headers[transport.HeaderError]) > maxTruncatedError:
			cutError = true
			c.Headers[transport.HeaderError] = cutUTF8(c.Headers[transport.HeaderError], maxTruncatedError) + " [truncated]"
			continue
		}
		return dl, err
	}
}

// cutUTF8 returns s cut to at most n bytes, at a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// deadLetterMisorder says why DeadLetter must not run inside the layers
// outer: it is the outermost middleware of this package.
func deadLetterMisorder(outer layer) *MisorderedError {
	switch {
	case outer&layerRetry != 0:
		return &MisorderedError{Middleware: "dead-letter", Found: "retry",
			Fix: "it would dead-letter after the first failure and the retries would never run; " +
				"put DeadLetter outside Retry (middleware.Recommended does)"}
	case outer&layerPark != 0:
		return &MisorderedError{Middleware: "dead-letter", Found: "park",
			Fix: "it would dead-letter a failing message and let its key's later messages overtake it; " +
				"put DeadLetter outside Park (middleware.Recommended with middleware.Parking does)"}
	case outer&layerDedupe != 0:
		return &MisorderedError{Middleware: "dead-letter", Found: "dedupe",
			Fix: "Dedupe would remember a dead-lettered message as done and skip its replay from the DLQ; " +
				"put DeadLetter outside Dedupe (middleware.Recommended with middleware.Deduplicate does)"}
	case outer&layerDeadLetter != 0:
		return &MisorderedError{Middleware: "dead-letter", Found: "dead-letter",
			Fix: "the outer one would never see a failure; use one DeadLetter per chain"}
	case outer&layerTimeout != 0:
		return &MisorderedError{Middleware: "dead-letter", Found: "timeout",
			Fix: "one deadline would span the handler and the DLQ publish: a message that used it up would be redelivered " +
				"forever instead of dead-lettered, and a publish cut short could leave a copy in the DLQ; put DeadLetter outside Timeout"}
	default:
		return &MisorderedError{Middleware: "dead-letter", Found: "recover",
			Fix: "a panic would be recovered outside DeadLetter and the message redelivered forever instead of dead-lettered; " +
				"put DeadLetter outside Recover"}
	}
}

// defaultDLQ is the DLQ the transport names for the message's group
// ([transport.DLQName], passed by the Router in [transport.StreamInfo]);
// outside a Router, "<group or subscription or topic>.dlq".
func defaultDLQ(ctx context.Context, m *handler.Message) string {
	if si, ok := transport.StreamFromContext(ctx); ok && si.DLQ != "" {
		return si.DLQ
	}
	f := m.Facts()
	return transport.DLQName(nil, transport.Subscription{Topic: m.Topic, Group: cmp.Or(f.Group, f.Subscription)})
}

// deadLetterOf returns the dead letter [DeadLetter] publishes for m, which
// failed with err, addressed to dlq: the [transport.DeadLetter] record, with
// the attempts and failure times of a [Retry] [ExhaustedError] in err's
// chain where there is one. Code that dead-letters by hand uses
// transport.NewDeadLetter, the same record.
func deadLetterOf(m *handler.Message, dlq string, err error, now time.Time) *handler.Message {
	d := transport.NewDeadLetter(m, err, now)
	var ex *ExhaustedError
	if errors.As(err, &ex) {
		d2 := transport.NewDeadLetter(m, ex.Err, now)
		d.Error, d.Attempts, d.FirstFailure, d.LastFailure = d2.Error, ex.Attempts, ex.FirstFailure, ex.LastFailure
	}
	return d.Message(m, dlq)
}
