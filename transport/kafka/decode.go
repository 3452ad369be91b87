package kafka

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// decode maps a record onto m: the record key to Key, the ferry-id header
// (or watermill-kafka's _watermill_message_uuid) to ID, the other headers
// to Headers. A header name that is not UTF-8, or a header repeated with
// different values, makes the record poison.
func decode(cm *sarama.ConsumerMessage, m *handler.Message) error {
	return decodeWith(cm, m, func(b []byte) string { return string(b) })
}

// decodeWith is decode with str making the Key and ID strings.
func decodeWith(cm *sarama.ConsumerMessage, m *handler.Message, str func([]byte) string) error {
	m.Topic = cm.Topic
	if cm.Key != nil {
		m.Key = str(cm.Key)
	}
	m.Payload = cm.Value
	var wmID []byte
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) { // compared without a copy; both names are UTF-8
		case transport.HeaderID:
			if m.ID == "" {
				m.ID = str(h.Value)
			} else if m.ID != string(h.Value) {
				return fmt.Errorf("kafka: header %s repeated with different values", h.Key)
			}
			continue
		case headerWatermillID:
			wmID = h.Value // copied only if there is no ferry-id
			continue
		}
		if !utf8.Valid(h.Key) {
			return fmt.Errorf("kafka: header name %q is not UTF-8", h.Key)
		}
		k, v := string(h.Key), string(h.Value)
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(cm.Headers))
		}
		if old, dup := m.Headers[k]; dup && old != v {
			return fmt.Errorf("kafka: header %s repeated with different values", k)
		}
		m.Headers[k] = v
	}
	if m.ID == "" && len(wmID) > 0 {
		m.ID = str(wmID)
	}
	return nil
}

// arena makes the Key and ID strings of a run of records from one
// allocation: newArena lays out their bytes in the order decodeWith asks
// for them (each record's key, then its ID), and str hands out the next
// piece, or copies b if it is not the next piece.
type arena struct {
	s   string
	off int
}

func newArena(recs []*sarama.ConsumerMessage) *arena {
	n := 0
	for _, cm := range recs {
		n += len(cm.Key) + len(idBytes(cm))
	}
	var b strings.Builder
	b.Grow(n)
	for _, cm := range recs {
		b.Write(cm.Key)
		b.Write(idBytes(cm))
	}
	return &arena{s: b.String()}
}

func (a *arena) str(b []byte) string {
	if end := a.off + len(b); end <= len(a.s) && a.s[a.off:end] == string(b) {
		s := a.s[a.off:end]
		a.off = end
		return s
	}
	return string(b)
}

// idBytes is the value decode takes the ID from: the first ferry-id
// header, else the last _watermill_message_uuid.
func idBytes(cm *sarama.ConsumerMessage) []byte {
	var wm []byte
	for _, h := range cm.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) {
		case transport.HeaderID:
			return h.Value
		case headerWatermillID:
			wm = h.Value
		}
	}
	return wm
}
