package redisstream

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Field names of a stream entry. Every other field is a header.
const (
	FieldID      = transport.HeaderID  // "ferry-id": Message.ID
	FieldKey     = transport.HeaderKey // "ferry-key": Message.Key
	FieldPayload = "payload"           // Message.Payload
)

// encode returns the XADD field/value list of m.
func encode(m *handler.Message) ([]any, error) {
	vals := make([]any, 0, 6+2*len(m.Headers))
	if m.ID != "" {
		vals = append(vals, FieldID, m.ID)
	}
	if m.Key != "" {
		vals = append(vals, FieldKey, m.Key)
	}
	for k, v := range m.Headers {
		if k == FieldID || k == FieldKey || k == FieldPayload {
			return nil, fmt.Errorf("%w: redisstream: publish %q: header %q: the name is a reserved stream field",
				transport.ErrInvalidOption, m.Topic, k)
		}
		vals = append(vals, k, v)
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	return append(vals, FieldPayload, payload), nil
}

// decode fills m from the fields of an entry. A missing payload field is an
// empty payload; fields other than the three reserved ones are headers.
func decode(m *handler.Message, vals map[string]any) {
	var hdr map[string]string
	for k, v := range vals {
		s, _ := v.(string)
		switch k {
		case FieldID:
			m.ID = s
		case FieldKey:
			m.Key = s
		case FieldPayload:
			// The reply string is referenced by nothing else: share its
			// bytes instead of copying them. Payloads are read-only by the
			// handler contract.
			m.Payload = unsafe.Slice(unsafe.StringData(s), len(s))
		default:
			if hdr == nil {
				hdr = make(map[string]string, len(vals))
			}
			hdr[k] = s
		}
	}
	m.Headers = hdr
}

// idTime returns the time part of a stream entry ID ("<ms>-<seq>").
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// compareIDs orders two entry IDs.
func compareIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	an, _ := strconv.ParseUint(am, 10, 64)
	bn, _ := strconv.ParseUint(bm, 10, 64)
	if an != bn {
		if an < bn {
			return -1
		}
		return 1
	}
	asq, _ := strconv.ParseUint(as, 10, 64)
	bsq, _ := strconv.ParseUint(bs, 10, 64)
	switch {
	case asq < bsq:
		return -1
	case asq > bsq:
		return 1
	}
	return 0
}

// ShardOf returns the shard of key on a topic of n shards: the FNV-1a
// 32-bit hash of the key's bytes, modulo n. Producers written with other
// clients use the same function to keep per-key order.
func ShardOf(key string, n int) int {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime
	}
	return int(h % uint32(n))
}

// StreamKey returns the Redis key of shard i of a topic of n shards: the
// topic itself when n is 1 (the default), else "<topic>:<i>".
func StreamKey(topic string, n, i int) string {
	if n <= 1 {
		return topic
	}
	return topic + ":" + strconv.Itoa(i)
}
