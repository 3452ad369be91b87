package transport

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
)

// Reserved header names. Headers starting with "ferry-" belong to Ferry.
// Where a broker has a native field for ID or Key (AMQP message_id, the Kafka
// record key, SQS MessageGroupId) the transport uses it, and uses these names
// only where it has none.
const (
	HeaderID  = "ferry-id"  // Message.ID where the broker has no native field
	HeaderKey = "ferry-key" // Message.Key where the broker has no native field

	// The dead-letter record ([DeadLetter]), next to the original headers.
	HeaderError          = "ferry-error"              // the error text
	HeaderErrorClass     = "ferry-error-class"        // handler.Class of the error
	HeaderAttempts       = "ferry-attempts"           // attempts made, decimal
	HeaderSubscription   = "ferry-subscription"       // the subscription (handler) name
	HeaderGroup          = "ferry-group"              // the consumer group
	HeaderOriginalTopic  = "ferry-original-topic"     // where the message was consumed from
	HeaderOriginalPart   = "ferry-original-partition" // Facts.Partition, decimal
	HeaderOriginalOffset = "ferry-original-offset"    // Facts.Offset, decimal
	HeaderOriginalBroker = "ferry-original-broker-id" // Facts.BrokerID
	HeaderFirstFailure   = "ferry-first-failure"      // RFC 3339 with nanoseconds, UTC
	HeaderLastFailure    = "ferry-last-failure"       // RFC 3339 with nanoseconds, UTC
)

// The truncation record, next to the dead-letter record on a dead letter
// whose DLQ refused it as too large ([ErrTooLarge]: the record's headers
// pushed a message near the broker's limit over it) and that was
// dead-lettered with its payload cut to fit instead. The payload is then a
// prefix of the original, not the original: the original can be recovered
// where the source keeps it (a Kafka or Redis Streams log, by the record's
// topic, partition and offset) and checked against the SHA-256. They are not
// in [DeadLetterHeaders], so a replay keeps them, and the dead-letter
// middleware refuses a message that carries HeaderTruncated instead of
// handing a cut payload to a handler.
const (
	HeaderTruncated      = "ferry-truncated"       // "true": the payload is a prefix of the original
	HeaderOriginalSize   = "ferry-original-size"   // the original payload's length in bytes, decimal
	HeaderOriginalSHA256 = "ferry-original-sha256" // SHA-256 of the original payload, lower-case hex
)

// DeadLetterHeaders lists the headers of the dead-letter record. Replay
// removes them, so that a replayed message carries exactly its original
// headers.
var DeadLetterHeaders = []string{
	HeaderError, HeaderErrorClass, HeaderAttempts, HeaderSubscription, HeaderGroup,
	HeaderOriginalTopic, HeaderOriginalPart, HeaderOriginalOffset,
	HeaderOriginalBroker, HeaderFirstFailure, HeaderLastFailure,
}

// maxStack bounds the panic stack written into the error text.
const maxStack = 4 << 10

// maxErrorText bounds the error text of a dead letter, stack included: an
// error message is the handler's to write, and one of any length would
// make the dead letter itself too large for the broker's header limits
// (RabbitMQ's frame, SQS's attributes), so that it could never be written.
const maxErrorText = 8 << 10

// DeadLetter is the failure record a dead letter carries in its headers,
// next to the original message's ID, Key, Payload and Headers, which stay
// byte for byte. It is the one shape of a dead letter: the dead-letter
// middleware, the parking lot's DLQ copy, and every transport that
// dead-letters by itself (a poison record, a delivery limit) build theirs
// with [NewDeadLetter] and [DeadLetter.Message], and operators read it back
// with [ReadDeadLetter].
type DeadLetter struct {
	Error         string    // the error text (with a panic's stack, up to 4 KiB)
	Class         string    // handler.Class of the error: "permanent", "transient", "panic", ...
	Attempts      int       // attempts made
	Subscription  string    // the subscription that gave it up (Facts.Subscription)
	Group         string    // its consumer group (Facts.Group)
	OriginalTopic string    // where it was consumed from; where replay sends it by default
	Partition     int32     // the original partition, or -1
	Offset        int64     // the original offset, or -1
	BrokerID      string    // the broker's ID of the failed delivery
	FirstFailure  time.Time // first failure seen
	LastFailure   time.Time // last failure seen
}

// NewDeadLetter returns the record of m failing with err, read from m's
// Facts: one attempt at least (Facts.Attempt), failing at now. Callers that
// know better (a retry loop's count and first failure) set the fields after.
func NewDeadLetter(m *handler.Message, err error, now time.Time) DeadLetter {
	f := m.Facts()
	text := "unknown error"
	if err != nil {
		text = err.Error()
		var pe *handler.PanicError
		if errors.As(err, &pe) && len(pe.Stack) > 0 {
			text += "\n\n" + string(pe.Stack[:min(len(pe.Stack), maxStack)])
		}
		text = errorText(text)
	}
	return DeadLetter{
		Error:         text,
		Class:         handler.Class(err),
		Attempts:      max(f.Attempt, 1),
		Subscription:  f.Subscription,
		Group:         f.Group,
		OriginalTopic: m.Topic,
		Partition:     f.Partition,
		Offset:        f.Offset,
		BrokerID:      f.BrokerID,
		FirstFailure:  now,
		LastFailure:   now,
	}
}

// errorText makes text fit a header on every broker: valid UTF-8 (an
// invalid byte becomes U+FFFD: the text describes the failure, it
// identifies nothing) and at most maxErrorText bytes, cut at a rune
// boundary with a marker saying so.
func errorText(text string) string {
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) <= maxErrorText {
		return text
	}
	const more = " … (error text truncated)"
	cut := maxErrorText - len(more)
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + more
}

// Message returns the dead letter of m: a copy sharing nothing with m,
// addressed to dlq, with no Facts, carrying m's headers and the record's
// (replacing any record m carried, as a replayed message that failed again
// does).
func (d DeadLetter) Message(m *handler.Message, dlq string) *handler.Message {
	dl := &handler.Message{ID: m.ID, Key: m.Key, Topic: dlq}
	if m.Payload != nil {
		dl.Payload = append([]byte(nil), m.Payload...)
	}
	h := make(map[string]string, len(m.Headers)+len(DeadLetterHeaders))
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderError] = d.Error
	h[HeaderErrorClass] = d.Class
	h[HeaderAttempts] = strconv.Itoa(d.Attempts)
	h[HeaderSubscription] = d.Subscription
	h[HeaderGroup] = d.Group
	h[HeaderOriginalTopic] = d.OriginalTopic
	h[HeaderOriginalPart] = strconv.FormatInt(int64(d.Partition), 10)
	h[HeaderOriginalOffset] = strconv.FormatInt(d.Offset, 10)
	h[HeaderOriginalBroker] = d.BrokerID
	h[HeaderFirstFailure] = d.FirstFailure.UTC().Format(time.RFC3339Nano)
	h[HeaderLastFailure] = d.LastFailure.UTC().Format(time.RFC3339Nano)
	dl.Headers = h
	return dl
}

// ReadDeadLetter parses the record of dead letter m (as
// [DeadLetters.ListDLQ] returns it). It reports false if m carries no
// [HeaderError], that is, if m is not a dead letter. A field whose header is
// missing or malformed is left zero (Partition and Offset -1).
func ReadDeadLetter(m *handler.Message) (DeadLetter, bool) {
	h := m.Headers
	text, ok := h[HeaderError]
	d := DeadLetter{Partition: -1, Offset: -1}
	if !ok {
		return d, false
	}
	d.Error = text
	d.Class = h[HeaderErrorClass]
	d.Subscription = h[HeaderSubscription]
	d.Group = h[HeaderGroup]
	d.OriginalTopic = h[HeaderOriginalTopic]
	d.BrokerID = h[HeaderOriginalBroker]
	d.Attempts, _ = strconv.Atoi(h[HeaderAttempts])
	if p, err := strconv.ParseInt(h[HeaderOriginalPart], 10, 32); err == nil {
		d.Partition = int32(p)
	}
	if o, err := strconv.ParseInt(h[HeaderOriginalOffset], 10, 64); err == nil {
		d.Offset = o
	}
	d.FirstFailure, _ = time.Parse(time.RFC3339Nano, h[HeaderFirstFailure])
	d.LastFailure, _ = time.Parse(time.RFC3339Nano, h[HeaderLastFailure])
	return d, true
}

// StripDeadLetterHeaders returns a copy of m without the dead-letter record,
// addressed to topic and with no Facts: what ReplayDLQ publishes.
func StripDeadLetterHeaders(m *handler.Message, topic string) *handler.Message {
	c := m.Clone()
	c.Topic = topic
	for _, h := range DeadLetterHeaders {
		delete(c.Headers, h)
	}
	if len(c.Headers) == 0 {
		c.Headers = nil
	}
	c.SetFacts(handler.Facts{})
	return c
}

// DLQSuffix is appended to a consumer group's name to name its DLQ where the
// transport has no rule of its own; see [DLQName].
const DLQSuffix = ".dlq"

// A DLQNamer is a Transport whose DLQ names follow a rule of the broker's
// (an SQS FIFO queue's DLQ must itself end in ".fifo"). It is optional;
// [DLQName] asks it.
type DLQNamer interface {
	// DLQName returns the name of the DLQ of sub's group: the topic, queue
	// or stream that dead letters are published to and that
	// [DeadLetters.ListDLQ] reads.
	DLQName(sub Subscription) string
}

// DLQName returns the DLQ of sub's group on t: t's own rule if t is a
// [DLQNamer], else sub.Group + ".dlq" (sub.Topic + ".dlq" with no group).
// The Router passes it to middleware in [StreamInfo], the dead-letter
// middleware publishes there, and the ferry command reads there, so all
// three agree on every transport.
func DLQName(t any, sub Subscription) string {
	if n, ok := t.(DLQNamer); ok {
		return n.DLQName(sub)
	}
	if sub.Group != "" {
		return sub.Group + DLQSuffix
	}
	return sub.Topic + DLQSuffix
}
