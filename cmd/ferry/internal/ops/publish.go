package ops

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
)

// Line is one message of a publish input in JSON form, one per line:
// {"id": …, "key": …, "headers": {…}, "payload": "text"} (or
// "payload_base64" for bytes). Every field but the payload is optional.
type Line struct {
	ID            string            `json:"id"`
	Key           string            `json:"key"`
	Headers       map[string]string `json:"headers"`
	Payload       *string           `json:"payload"`
	PayloadBase64 []byte            `json:"payload_base64"`
}

// NewID returns a random message ID, for messages given without one.
func NewID() string { return strings.ToLower(rand.Text()) }

// ReadMessages reads one message per line of r for topic: with asJSON each
// line is a [Line], else the line is the payload. Messages without an ID
// get one from [NewID]; key and headers apply to each one that has none.
// Empty lines are skipped. A malformed line is an error wrapping
// [ErrUsage] that names its number.
func ReadMessages(r io.Reader, topic string, asJSON bool, key string, headers map[string]string) ([]*handler.Message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []*handler.Message
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		m := &handler.Message{Topic: topic, Key: key}
		if asJSON {
			var l Line
			dec := json.NewDecoder(strings.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&l); err != nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrUsage, n, err)
			}
			m.ID, m.Headers = l.ID, l.Headers
			if l.Key != "" {
				m.Key = l.Key
			}
			switch {
			case l.Payload != nil:
				m.Payload = []byte(*l.Payload)
			default:
				m.Payload = l.PayloadBase64
			}
		} else {
			m.Payload = []byte(text)
		}
		if m.ID == "" {
			m.ID = NewID()
		}
		for k, v := range headers {
			if _, set := m.Headers[k]; !set {
				if m.Headers == nil {
					m.Headers = map[string]string{}
				}
				m.Headers[k] = v
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading messages: %w", err)
	}
	return out, nil
}

// Publish publishes msgs in order through t's Publisher, one confirmed
// write after another, telling progress. When ctx ends it stops between
// messages and returns how many were confirmed: publishing the rest again
// with the same IDs is safe where consumers dedupe.
func Publish(ctx context.Context, t transport.Publisher, msgs []*handler.Message, progress Progress) (int, error) {
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			return i, fmt.Errorf("publish: stopped after %d of %d: %w", i, len(msgs), err)
		}
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		err := t.Publish(cctx, m)
		cancel()
		if err != nil {
			return i, fmt.Errorf("publish %q to %s (after %d of %d): %w", m.ID, m.Topic, i, len(msgs), err)
		}
		if progress != nil {
			progress(i+1, len(msgs))
		}
	}
	return len(msgs), nil
}
