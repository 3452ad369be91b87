package rabbitmq

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Message headers that stand for AMQP basic properties. On receive the
// properties appear under these names in Message.Headers (when set); on
// publish these headers set the properties instead of going into the
// headers table.
const (
	HeaderContentType     = "content-type"
	HeaderContentEncoding = "content-encoding"
	HeaderCorrelationID   = "correlation-id"
	HeaderReplyTo         = "reply-to"
	HeaderType            = "amqp-type"
	HeaderAppID           = "amqp-app-id"
	HeaderPriority        = "amqp-priority"
)

// Private headers of this transport. They travel in the AMQP headers table
// but never appear in Message.Headers.
const (
	hdrPrior = "x-ferry-prior-attempts" // attempts made before the last trip through a retry queue
	hdrTopic = "x-ferry-topic"          // the subscription's topic, kept through retry queues
	hdrQueue = "x-ferry-queue"          // the queue a retried message returns to
)

// brokerOwned reports whether header k is set by the broker (dead-lettering,
// delivery counting) and so is never published from Message.Headers.
func brokerOwned(k string) bool {
	if !strings.HasPrefix(k, "x-") {
		return false
	}
	switch k {
	case "x-death", "x-delivery-count", "x-first-death-exchange", "x-first-death-queue",
		"x-first-death-reason", "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason",
		hdrPrior, hdrTopic, hdrQueue:
		return true
	}
	return false
}

// headerString renders any AMQP field value as text: integers and floats in
// decimal, booleans as true/false, decimals exactly, timestamps in RFC 3339
// UTC, byte arrays as text when they are UTF-8 (base64 otherwise), and
// tables and arrays (x-death) as JSON.
func headerString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return base64.StdEncoding.EncodeToString(x)
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case amqp.Decimal:
		return decimalString(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	default:
		b, err := json.Marshal(jsonable(v))
		if err != nil {
			return ""
		}
		return string(b)
	}
}

func decimalString(d amqp.Decimal) string {
	r := new(big.Rat).SetFrac(big.NewInt(int64(d.Value)), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil))
	return r.FloatString(int(d.Scale))
}

// jsonable turns tables and arrays into values encoding/json renders the
// way headerString renders scalars.
func jsonable(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = jsonable(e)
		}
		return m
	case map[string]any:
		return jsonable(amqp.Table(x))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case []byte, amqp.Decimal, time.Time:
		return headerString(x)
	default:
		return x
	}
}

// headerInt reads an integer-valued header of any AMQP integer type (or a
// decimal string), reporting whether there was one.
func headerInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// toPublishing builds the AMQP message for m: persistent, message_id = ID,
// the Key in the ferry-key header, property headers lifted into properties,
// every other header a long string in the table.
func toPublishing(m *handler.Message, now time.Time) amqp.Publishing {
	p := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    now,
		Body:         m.Payload,
	}
	n := len(m.Headers)
	if m.Key != "" {
		n++
	}
	if n > 0 {
		p.Headers = make(amqp.Table, n)
	}
	if m.Key != "" {
		p.Headers[transport.HeaderKey] = m.Key
	}
	for k, v := range m.Headers {
		if v == "" {
			// An empty property is no property: the value travels in
			// the table, where it is kept.
			if !brokerOwned(k) {
				p.Headers[k] = v
			}
			continue
		}
		switch k {
		case HeaderContentType:
			p.ContentType = v
		case HeaderContentEncoding:
			p.ContentEncoding = v
		case HeaderCorrelationID:
			p.CorrelationId = v
		case HeaderReplyTo:
			p.ReplyTo = v
		case HeaderType:
			p.Type = v
		case HeaderAppID:
			p.AppId = v
		case HeaderPriority:
			// Only a priority that comes back as written is lifted: 0 is
			// no priority, and "007" would come back as "7".
			if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 255 && strconv.Itoa(n) == v {
				p.Priority = uint8(n)
			} else {
				p.Headers[k] = v
			}
		case transport.HeaderKey:
			// The Key field wins.
			if m.Key == "" {
				p.Headers[k] = v
			}
		default:
			if !brokerOwned(k) {
				p.Headers[k] = v
			}
		}
	}
	return p
}

// maxShortstr is the longest AMQP short string: message_id, the routing
// key, a header name, the text properties.
const maxShortstr = 255

// checkMessage reports why m, published with routing key rk, would not
// come back byte for byte, or would not be sent at all: an ID, routing key
// (from the Key), header name or text property longer than an AMQP short
// string (the client fails half-way through the frame, breaking the
// channel), or a header named like the fields where ID and Key travel. The
// error wraps transport.ErrInvalidMessage and quotes no value.
func checkMessage(m *handler.Message, rk string) error {
	switch {
	case len(m.ID) > maxShortstr:
		return fmt.Errorf("%w: Message.ID is %d bytes; AMQP's message_id holds at most %d", transport.ErrInvalidMessage, len(m.ID), maxShortstr)
	case len(rk) > maxShortstr:
		return fmt.Errorf("%w: the routing key made from Message.Key is %d bytes; AMQP holds at most %d", transport.ErrInvalidMessage, len(rk), maxShortstr)
	case len(m.Key) > maxShortstr:
		return fmt.Errorf("%w: Message.Key is %d bytes; AMQP's routing key holds at most %d", transport.ErrInvalidMessage, len(m.Key), maxShortstr)
	}
	for k, v := range m.Headers {
		switch {
		case len(k) > maxShortstr:
			return fmt.Errorf("%w: a header name is %d bytes; AMQP field names hold at most %d", transport.ErrInvalidMessage, len(k), maxShortstr)
		case k == transport.HeaderID:
			return fmt.Errorf("%w: header %q is where the consumer reads an ID without message_id; set Message.ID instead", transport.ErrInvalidMessage, k)
		case k == transport.HeaderKey:
			return fmt.Errorf("%w: header %q is where Message.Key travels; set Key instead", transport.ErrInvalidMessage, k)
		case isAttemptHeader(k):
			return fmt.Errorf("%w: header %q is the broker's or this transport's own attempt record: a consumer never returns it, and only the broker's count drives the retry budget", transport.ErrInvalidMessage, k)
		case len(v) > maxShortstr && isTextProperty(k):
			return fmt.Errorf("%w: header %q is the AMQP property of that name, which holds at most %d bytes (%d given)", transport.ErrInvalidMessage, k, maxShortstr, len(v))
		}
	}
	return nil
}

// isAttemptHeader reports whether k is a header the broker or this
// transport's retry path sets to count attempts or route retries. Publish
// refuses them: a consumer drops them from Message.Headers, and a
// publisher must never drive another subscriber's retry budget.
func isAttemptHeader(k string) bool {
	switch k {
	case "x-delivery-count", hdrPrior, hdrTopic, hdrQueue:
		return true
	}
	return false
}

// isTextProperty reports whether header k sets an AMQP text property.
func isTextProperty(k string) bool {
	switch k {
	case HeaderContentType, HeaderContentEncoding, HeaderCorrelationID, HeaderReplyTo, HeaderType, HeaderAppID:
		return true
	}
	return false
}

// fromDelivery fills m from d: ID from message_id (or the ferry-id header),
// Key from the ferry-key header (or the routing key when the header is
// absent), every header rendered as text (x-delivery-count becomes
// Facts.Attempt instead), and the property headers.
func fromDelivery(m *handler.Message, d *amqp.Delivery, topic string) {
	m.ID = d.MessageId
	m.Topic = topic
	m.Payload = d.Body
	// The map is made only when a header is left for it: a message whose
	// only headers are Ferry's key and ID (the usual case) costs none.
	var h map[string]string
	put := func(k, v string) {
		if h == nil {
			h = make(map[string]string, len(d.Headers)+4)
		}
		h[k] = v
	}
	keySet := false
	for k, v := range d.Headers {
		switch k {
		case transport.HeaderKey:
			m.Key, keySet = headerString(v), true
			continue
		case transport.HeaderID:
			if d.MessageId == "" {
				m.ID = headerString(v)
			}
			continue
		case hdrPrior, hdrTopic, hdrQueue, "x-delivery-count":
			// Private, or read into Facts.Attempt.
			continue
		case "x-death":
			if v = withoutDelayDeaths(v); v == nil {
				continue
			}
		case "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason":
			if isDelayQueue(headerString(d.Headers["x-first-death-queue"])) {
				continue
			}
		case "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason":
			if isDelayQueue(headerString(d.Headers["x-last-death-queue"])) {
				continue
			}
		}
		put(k, headerString(v))
	}
	if !keySet {
		if _, retried := d.Headers[hdrQueue]; !retried {
			m.Key = d.RoutingKey
		}
	}
	set := func(k, v string) {
		if v != "" {
			put(k, v)
		}
	}
	set(HeaderContentType, d.ContentType)
	set(HeaderContentEncoding, d.ContentEncoding)
	set(HeaderCorrelationID, d.CorrelationId)
	set(HeaderReplyTo, d.ReplyTo)
	set(HeaderType, d.Type)
	set(HeaderAppID, d.AppId)
	if d.Priority != 0 {
		put(HeaderPriority, strconv.Itoa(int(d.Priority)))
	}
	m.Headers = h
}

// withoutDelayDeaths returns the x-death value v without the entries of
// PublishAt's delay queues (see isDelayDeath), nil when none is left: a
// delayed message reaches its consumer through the delay queue's
// dead-lettering, and its handler sees the headers that were published,
// not that trip. Entries of other queues (a retry queue, a DLQ) stay.
func withoutDelayDeaths(v any) any {
	deaths, ok := v.([]any)
	if !ok {
		return v
	}
	kept := make([]any, 0, len(deaths))
	for _, e := range deaths {
		if !isDelayDeath(e) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// isDelayDeath reports whether x-death entry e records a message expiring
// from one of PublishAt's delay queues: reason expired, published to the
// delay exchange of the queue's own name (declareDelay binds them so),
// the queue named "<topic>.delay.<s>s".
func isDelayDeath(e any) bool {
	t, ok := e.(amqp.Table)
	if !ok {
		return false
	}
	q, _ := t["queue"].(string)
	x, _ := t["exchange"].(string)
	r, _ := t["reason"].(string)
	return r == "expired" && q == x && isDelayQueue(q)
}

// isDelayQueue reports whether q is named as PublishAt's delay queues are:
// "<topic>.delay.<s>s", s a positive whole number of seconds.
func isDelayQueue(q string) bool {
	i := strings.LastIndex(q, ".delay.")
	if i <= 0 {
		return false
	}
	secs, ok := strings.CutSuffix(q[i+len(".delay."):], "s")
	if !ok || secs == "" {
		return false
	}
	n, err := strconv.ParseUint(secs, 10, 64)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == secs
}

// attemptOf is the 1-based attempt of d, delivered from queue (of type
// queueType): the attempts made before its last trip through a retry
// queue, plus the broker's delivery count, plus one.
//
// Only what a publisher cannot set counts. The delivery count is read
// from x-delivery-count only on a quorum queue and only on a redelivery:
// a quorum queue writes that header itself on every delivery (RabbitMQ
// 3.10 overwrites a publisher's value; older versions add it only from
// the first redelivery on), and a classic queue never does, so there only
// the redelivered flag counts (attempt 2). The prior attempts
// (x-ferry-prior-attempts) are read only from a message that came back
// from one of this queue's retry queues (see viaRetry); on any other
// message the header is ignored, whoever set it.
func attemptOf(d *amqp.Delivery, queue, queueType string) int {
	var count int64
	if d.Redelivered {
		count = 1
		if queueType == QueueQuorum {
			if n, ok := headerInt(d.Headers["x-delivery-count"]); ok && n > 0 {
				count = n
			}
		}
	}
	var prior int64
	if viaRetry(d, queue) {
		if n, ok := headerInt(d.Headers[hdrPrior]); ok && n > 0 {
			prior = n
		}
	}
	return int(prior + count + 1)
}

// viaRetry reports whether d reached queue through the path of this
// transport's delayed Nack: the broker dead-lettered it, expired, from one
// of queue's retry queues ("<queue>.retry.<ms>ms", the newest x-death
// entry) through the default exchange with the queue's name as routing
// key, which is how the retry queue is declared (declareRetry). A message
// published to a topic's exchange, headers copied from anywhere, does not
// qualify: its exchange is the topic's. To fake the path a publisher must
// publish to the default exchange (RabbitMQ's "amq.default" resource),
// which a permission without write access to it denies.
func viaRetry(d *amqp.Delivery, queue string) bool {
	if d.Exchange != "" || d.RoutingKey != queue {
		return false
	}
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		return false
	}
	newest, _ := deaths[0].(amqp.Table)
	q, _ := newest["queue"].(string)
	reason, _ := newest["reason"].(string)
	return reason == "expired" && strings.HasPrefix(q, queue+".retry.") && strings.HasSuffix(q, "ms")
}
