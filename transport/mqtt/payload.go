package mqtt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// An IDFunc computes Message.ID from a raw MQTT message: its topic and
// payload. It must be deterministic (a redelivery must get the same ID, or
// dedupe fails) and safe for concurrent use; it must not keep payload.
type IDFunc func(topic string, payload []byte) string

// A KeyFunc computes Message.Key, the ordering key, from a raw MQTT
// message. It must be deterministic and safe for concurrent use; it must
// not keep payload.
type KeyFunc func(topic string, payload []byte) string

// ContentHash is the default [IDFunc]: the first 128 bits of SHA-256 over
// the topic, a zero byte and the payload, in hex. A redelivery gets the
// same ID, so dedupe works with devices that send no ID; but two identical
// payloads on one topic are one event to dedupe, so devices should put a
// timestamp or counter in their readings.
func ContentHash(topic string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(payload)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// TopicKey is the default [KeyFunc]: the topic itself, so that each topic
// (one device's stream) is handled in order.
func TopicKey(topic string, _ []byte) string { return topic }

// TopicLevel returns a [KeyFunc] that picks level n of the topic (0 is the
// first; -1 the last, -2 the one before), or the whole topic if it has too
// few levels. For sites/<site>/sensors/<device>/temperature, TopicLevel(3)
// is the device ID, so all of a device's topics share one order.
func TopicLevel(n int) KeyFunc {
	return func(topic string, _ []byte) string {
		levels := strings.Split(topic, "/")
		i := n
		if i < 0 {
			i += len(levels)
		}
		if i < 0 || i >= len(levels) {
			return topic
		}
		return levels[i]
	}
}

// JSONField returns a function, usable as an [IDFunc] or a [KeyFunc]
// (convert it), that reads the top-level field name of a JSON object
// payload: a string as is, a number or boolean as written. It returns ""
// (so that the default applies) when the payload is not a JSON object or
// has no such field.
func JSONField(name string) func(topic string, payload []byte) string {
	return func(_ string, payload []byte) string {
		var obj map[string]json.RawMessage
		if json.Unmarshal(payload, &obj) != nil {
			return ""
		}
		raw, ok := obj[name]
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] == '{' || raw[0] == '[' || string(raw) == "null" {
			return ""
		}
		return string(raw)
	}
}

// FirstOf returns a function, usable as an [IDFunc] or a [KeyFunc]
// (convert it), that returns the first non-empty result of fns, in order.
// FirstOf(JSONField("id"), ContentHash) reads a device's ID and hashes the
// payload of devices that send none.
func FirstOf(fns ...func(topic string, payload []byte) string) func(topic string, payload []byte) string {
	return func(topic string, payload []byte) string {
		for _, f := range fns {
			if v := f(topic, payload); v != "" {
				return v
			}
		}
		return ""
	}
}

// parseIDFunc reads the id URL key: hash or json:<field>.
func parseIDFunc(v string) (IDFunc, error) {
	switch {
	case v == "hash":
		return ContentHash, nil
	case strings.HasPrefix(v, "json:") && len(v) > len("json:"):
		return IDFunc(FirstOf(JSONField(v[len("json:"):]), ContentHash)), nil
	}
	return nil, errors.New("want hash or json:<field>")
}

// parseKeyFunc reads the key URL key: topic, level:<n> or json:<field>.
func parseKeyFunc(v string) (KeyFunc, error) {
	switch {
	case v == "topic":
		return TopicKey, nil
	case strings.HasPrefix(v, "level:"):
		n, err := strconv.Atoi(v[len("level:"):])
		if err != nil {
			return nil, errors.New("level:<n> wants an integer")
		}
		return TopicLevel(n), nil
	case strings.HasPrefix(v, "json:") && len(v) > len("json:"):
		return KeyFunc(FirstOf(JSONField(v[len("json:"):]), TopicKey)), nil
	}
	return nil, errors.New("want topic, level:<n> or json:<field>")
}
