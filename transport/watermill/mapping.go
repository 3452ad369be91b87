package watermill

import (
	"fmt"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// The one mapping between the two message types, used in both directions:
//
//	Ferry Message.ID       <-> Watermill UUID
//	Ferry Message.Key      <-> metadata[keyField] (absent when Key is empty)
//	Ferry Message.Headers  <-> the rest of the metadata
//	Ferry Message.Payload  <-> Payload
//	Ferry Message.Topic    <-> the topic argument of Publish and Subscribe

// toWatermill returns the Watermill message for m, after refusing what the
// way back (fromWatermill) would not return byte for byte: a header named
// like the key field, and text that is not UTF-8 (most adapters carry the
// UUID and metadata as text: JSON in watermill-sql, protobuf strings in
// Google Cloud Pub/Sub). The payload is copied, since adapters may keep the
// message after Publish returns (gochannel delivers it later) while the
// caller may reuse its buffer.
func (c *config) toWatermill(m *handler.Message) (*message.Message, error) {
	if err := c.check(m); err != nil {
		return nil, err
	}
	var payload []byte
	if m.Payload != nil {
		payload = append(make([]byte, 0, len(m.Payload)), m.Payload...)
	}
	w := message.NewMessage(m.ID, payload)
	if m.Key != "" {
		w.Metadata[c.keyField] = m.Key
	}
	for k, v := range m.Headers {
		w.Metadata[k] = v
	}
	if c.validate != nil {
		if err := c.validate(w); err != nil {
			return nil, fmt.Errorf("%w: watermill: publish %s: message %q refused by Validate: %w",
				transport.ErrInvalidMessage, m.Topic, m.ID, err)
		}
	}
	return w, nil
}

// check refuses m where the bridge could not carry it faithfully.
func (c *config) check(m *handler.Message) error {
	if m.Topic == "" {
		return fmt.Errorf("%w: watermill: publish: message has no Topic", transport.ErrInvalidOption)
	}
	if c.maxPayload > 0 && len(m.Payload) > c.maxPayload {
		return fmt.Errorf("watermill: publish %s: payload of %d bytes over the limit of %d: %w",
			m.Topic, len(m.Payload), c.maxPayload, transport.ErrTooLarge)
	}
	if !utf8.ValidString(m.ID) {
		return fmt.Errorf("%w: watermill: publish %s: Message.ID is not UTF-8; Watermill adapters carry the UUID as text",
			transport.ErrInvalidMessage, m.Topic)
	}
	if !utf8.ValidString(m.Key) {
		return fmt.Errorf("%w: watermill: publish %s: message %q: Key is not UTF-8; it travels as metadata text",
			transport.ErrInvalidMessage, m.Topic, m.ID)
	}
	for k, v := range m.Headers {
		if k == c.keyField {
			return fmt.Errorf("%w: watermill: publish %s: message %q: header %q is where Message.Key travels; set Key instead",
				transport.ErrInvalidMessage, m.Topic, m.ID, k)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: watermill: publish %s: message %q: a header name or value is not UTF-8; metadata travels as text",
				transport.ErrInvalidMessage, m.Topic, m.ID)
		}
	}
	return nil
}

// fromWatermill fills m from w, received on topic: the inverse of
// toWatermill. The payload is shared with w, read-only. The metadata map is
// not copied when it holds no key field; otherwise the headers are a copy
// without it.
func (c *config) fromWatermill(w *message.Message, topic string, m *handler.Message) {
	*m = handler.Message{ID: w.UUID, Topic: topic, Payload: w.Payload}
	md := w.Metadata
	if len(md) == 0 {
		return
	}
	key, ok := md[c.keyField]
	if !ok {
		m.Headers = md
		return
	}
	m.Key = key
	if len(md) == 1 {
		return
	}
	h := make(map[string]string, len(md)-1)
	for k, v := range md {
		if k != c.keyField {
			h[k] = v
		}
	}
	m.Headers = h
}

// toFerry returns the Ferry message for w, to be published on topic: the
// inverse of fromFerry. It refuses a key field that is present but empty,
// which Ferry's Key could not return (an empty Key means no key).
func (c *config) toFerry(w *message.Message, topic string) (*handler.Message, error) {
	if v, ok := w.Metadata[c.keyField]; ok && v == "" {
		return nil, fmt.Errorf("%w: watermill: publish %s: message %q: metadata field %q is empty; Ferry's Key cannot carry an empty key (leave the field out)",
			transport.ErrInvalidMessage, topic, w.UUID, c.keyField)
	}
	m := &handler.Message{}
	c.fromWatermill(w, topic, m)
	return m, nil
}

// fromFerry returns the Watermill message handed to a Watermill handler for
// m: UUID m.ID, the shared payload, and metadata m.Headers plus the key
// field. The metadata is a new map, which the handler may change.
func (c *config) fromFerry(m *handler.Message) *message.Message {
	w := message.NewMessage(m.ID, m.Payload)
	for k, v := range m.Headers {
		w.Metadata[k] = v
	}
	if m.Key != "" {
		w.Metadata[c.keyField] = m.Key
	}
	return w
}
