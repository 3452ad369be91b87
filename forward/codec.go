package forward

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/ferrymq/ferry/handler"
)

// A buffered message is stored as one value:
//
//	version (1 byte, 1)
//	topic, ID, key: each a uvarint length and the bytes
//	header count (uvarint), then each header's name and value, sorted by name
//	payload: the rest
//
// Every byte of ID, Key, Headers and Payload is kept as given.

const codecVersion = 1

// encode appends m's encoding to dst.
func encode(dst []byte, m *handler.Message) []byte {
	dst = append(dst, codecVersion)
	dst = appendField(dst, m.Topic)
	dst = appendField(dst, m.ID)
	dst = appendField(dst, m.Key)
	dst = binary.AppendUvarint(dst, uint64(len(m.Headers)))
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = appendField(dst, k)
		dst = appendField(dst, m.Headers[k])
	}
	return append(dst, m.Payload...)
}

func appendField(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

var errCorrupt = errors.New("forward: corrupt buffered message")

// decode reads an encoding made by encode. The message does not share b.
func decode(b []byte) (*handler.Message, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return nil, errCorrupt
	}
	b = b[1:]
	field := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	m := &handler.Message{}
	var ok bool
	if m.Topic, ok = field(); !ok {
		return nil, errCorrupt
	}
	if m.ID, ok = field(); !ok {
		return nil, errCorrupt
	}
	if m.Key, ok = field(); !ok {
		return nil, errCorrupt
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, errCorrupt
	}
	b = b[w:]
	if n > 0 {
		m.Headers = make(map[string]string, n)
		for range n {
			k, ok1 := field()
			v, ok2 := field()
			if !ok1 || !ok2 {
				return nil, errCorrupt
			}
			m.Headers[k] = v
		}
	}
	m.Payload = append([]byte{}, b...)
	return m, nil
}
