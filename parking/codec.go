package parking

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/ferrymq/ferry/handler"
)

// wireMessage is the JSON form of a parked message.
type wireMessage struct {
	ID      string            `json:"id"`
	Key     string            `json:"key"`
	Topic   string            `json:"topic"`
	Payload []byte            `json:"payload,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Facts   WireFacts         `json:"facts"`
	// Enc is "base64" when every string above (ID, Key, Topic, header
	// names and values, and the facts' strings) is base64 of its bytes:
	// JSON strings cannot hold invalid UTF-8 (encoding/json writes U+FFFD
	// for it), and a changed ID would defeat dedupe at the release. Empty
	// otherwise, so a valid message's form stays readable.
	Enc string `json:"enc,omitempty"`
}

// encBase64 is the value of wireMessage.Enc for base64 strings.
const encBase64 = "base64"

// strings applies f to every string field of w.
func (w *wireMessage) strings(f func(string) (string, error)) error {
	for _, p := range []*string{&w.ID, &w.Key, &w.Topic, &w.Facts.Transport, &w.Facts.Subscription, &w.Facts.BrokerID} {
		v, err := f(*p)
		if err != nil {
			return err
		}
		*p = v
	}
	if w.Headers != nil {
		h := make(map[string]string, len(w.Headers))
		for k, v := range w.Headers {
			k2, err := f(k)
			if err != nil {
				return err
			}
			v2, err := f(v)
			if err != nil {
				return err
			}
			h[k2] = v2
		}
		w.Headers = h
	}
	return nil
}

// valid reports whether every string of w is valid UTF-8.
func (w *wireMessage) valid() bool {
	ok := true
	_ = w.strings(func(s string) (string, error) {
		ok = ok && utf8.ValidString(s)
		return s, nil
	})
	return ok
}

// WireFacts is the JSON form of [handler.Facts] that stores keep with a
// parked message.
type WireFacts struct {
	Attempt      int       `json:"attempt,omitempty"`
	Transport    string    `json:"transport,omitempty"`
	Subscription string    `json:"subscription,omitempty"`
	Partition    int32     `json:"partition"`
	Offset       int64     `json:"offset"`
	BrokerID     string    `json:"broker_id,omitempty"`
	PublishedAt  time.Time `json:"published_at,omitzero"`
	ReceivedAt   time.Time `json:"received_at,omitzero"`
}

// FactsOf returns the wire form of f.
func FactsOf(f handler.Facts) WireFacts {
	return WireFacts{Attempt: f.Attempt, Transport: f.Transport, Subscription: f.Subscription,
		Partition: f.Partition, Offset: f.Offset, BrokerID: f.BrokerID,
		PublishedAt: f.PublishedAt, ReceivedAt: f.ReceivedAt}
}

// Facts returns the handler.Facts of w.
func (w WireFacts) Facts() handler.Facts {
	return handler.Facts{Attempt: w.Attempt, Transport: w.Transport, Subscription: w.Subscription,
		Partition: w.Partition, Offset: w.Offset, BrokerID: w.BrokerID,
		PublishedAt: w.PublishedAt, ReceivedAt: w.ReceivedAt}
}

// MarshalMessage returns the JSON form in which stores keep a parked
// message: ID, Key, Topic, Payload (base64), Headers and Facts, byte for
// byte. [UnmarshalMessage] reverses it. A message with a string that is
// not valid UTF-8 (JSON cannot carry one) has all its strings written in
// base64, so it too comes back exactly.
func MarshalMessage(m *handler.Message) ([]byte, error) {
	w := wireMessage{ID: m.ID, Key: m.Key, Topic: m.Topic, Payload: m.Payload,
		Headers: maps.Clone(m.Headers), Facts: FactsOf(m.Facts())}
	if !w.valid() {
		w.Enc = encBase64
		_ = w.strings(func(s string) (string, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil })
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("parking: encode message %s: %w", m.ID, err)
	}
	return b, nil
}

// UnmarshalMessage decodes a message encoded by [MarshalMessage].
func UnmarshalMessage(b []byte) (*handler.Message, error) {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("parking: decode message: %w", err)
	}
	switch w.Enc {
	case "":
	case encBase64:
		err := w.strings(func(s string) (string, error) {
			b, err := base64.StdEncoding.DecodeString(s)
			return string(b), err
		})
		if err != nil {
			return nil, fmt.Errorf("parking: decode message: %w", err)
		}
	default:
		return nil, fmt.Errorf("parking: decode message: unknown string encoding %q", w.Enc)
	}
	m := &handler.Message{ID: w.ID, Key: w.Key, Topic: w.Topic, Payload: w.Payload, Headers: w.Headers}
	m.SetFacts(w.Facts.Facts())
	return m, nil
}
