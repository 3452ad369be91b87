package parking

import (
	"encoding/json"
	"fmt"
	"time"

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
// byte. [UnmarshalMessage] reverses it.
func MarshalMessage(m *handler.Message) ([]byte, error) {
	b, err := json.Marshal(wireMessage{ID: m.ID, Key: m.Key, Topic: m.Topic, Payload: m.Payload,
		Headers: m.Headers, Facts: FactsOf(m.Facts())})
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
	m := &handler.Message{ID: w.ID, Key: w.Key, Topic: w.Topic, Payload: w.Payload, Headers: w.Headers}
	m.SetFacts(w.Facts.Facts())
	return m, nil
}
