package redisstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
)

// replayConn is a connection whose server has already written reply:
// reads return it, writes (the command) are dropped.
type replayConn struct {
	net.Conn // nil: only the methods below are used
	r        *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) RemoteAddr() net.Addr             { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// decodeReply runs readConn's decoder over reply, as the answer to an
// XREADGROUP, and returns the messages it read, each with its stream key
// and entry ID in Headers["_stream"] and Headers["_id"].
func decodeReply(reply []byte) ([]*handler.Message, error) {
	conn := &replayConn{r: bytes.NewReader(reply)}
	c := &readConn{cfg: &config{timeout: time.Second}, conn: conn, br: bufio.NewReaderSize(conn, readBufSize)}
	if err := c.decode(time.Now().Add(time.Second), []string{"XREADGROUP"}); err != nil {
		return nil, err
	}
	if conn.r.Len() > 0 {
		return nil, fmt.Errorf("%d bytes of the reply left unread", conn.r.Len())
	}
	arena := c.takeArena()
	var out []*handler.Message
	for i := range c.entries {
		e := &c.entries[i]
		m := &handler.Message{}
		id := c.message(m, e, arena)
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers["_stream"], m.Headers["_id"] = c.keys[e.stream].of(arena), id
		out = append(out, m)
	}
	return out, nil
}

// resp builds RESP2: a string is a bulk string, nil a null array, a slice
// an array.
func resp(v any) []byte {
	switch v := v.(type) {
	case string:
		return fmt.Appendf(nil, "$%d\r\n%s\r\n", len(v), v)
	case nil:
		return []byte("*-1\r\n")
	case []any:
		b := fmt.Appendf(nil, "*%d\r\n", len(v))
		for _, e := range v {
			b = append(b, resp(e)...)
		}
		return b
	}
	panic(fmt.Sprintf("resp: %T", v))
}

// A reply of two streams: every field kind, an empty and a missing
// payload, binary bytes and CRLFs inside bulk strings, and an entry whose
// fields are null (deleted while pending), as go-redis reads them.
func TestReadConnDecode(t *testing.T) {
	reply := resp([]any{
		[]any{"orders", []any{
			[]any{"1-1", []any{"ferry-id", "m1", "ferry-key", "k1", "source", "web", "payload", "{\"n\":1}"}},
			[]any{"1-2", []any{"payload", "", "ferry-id", "m2"}},
			[]any{"1-3", []any{"ferry-id", "m3", "x", "\r\n$3\r\n\x00\xff"}},
		}},
		[]any{"orders:1", []any{
			[]any{"2-1", nil},
			[]any{"2-2", []any{"payload", "\x00\r\n\xfe"}},
		}},
	})
	got, err := decodeReply(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, key, stream, entry string
		payload                []byte
		hdrs                   int
	}{
		{"m1", "k1", "orders", "1-1", []byte(`{"n":1}`), 1},
		{"m2", "", "orders", "1-2", []byte{}, 0},
		{"m3", "", "orders", "1-3", nil, 1},
		{"", "", "orders:1", "2-1", nil, 0},
		{"", "", "orders:1", "2-2", []byte("\x00\r\n\xfe"), 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages, want %d", len(got), len(want))
	}
	for i, w := range want {
		m := got[i]
		if m.ID != w.id || m.Key != w.key || m.Headers["_stream"] != w.stream || m.Headers["_id"] != w.entry ||
			!bytes.Equal(m.Payload, w.payload) || (w.payload == nil) != (m.Payload == nil) || len(m.Headers)-2 != w.hdrs {
			t.Errorf("entry %d: %q %q %q %q payload %q headers %q; want %+v", i, m.ID, m.Key, m.Headers["_stream"], m.Headers["_id"], m.Payload, m.Headers, w)
		}
	}
	if got[0].Headers["source"] != "web" || got[2].Headers["x"] != "\r\n$3\r\n\x00\xff" {
		t.Errorf("headers %q and %q", got[0].Headers, got[2].Headers)
	}
	// A payload has a slice of its own: appending to it cannot reach
	// another string of the batch.
	if p := got[4].Payload; cap(p) != len(p) {
		t.Errorf("payload of len %d has cap %d: an append would write past it", len(p), cap(p))
	}

	// BLOCK ran out: a null array, no entries.
	if got, err := decodeReply([]byte("*-1\r\n")); err != nil || len(got) != 0 {
		t.Fatalf("null reply: %d messages, %v", len(got), err)
	}
}

// Every cut of a valid reply, and each kind of damage, is an error (never
// a panic or a short batch passed off as whole); an error reply is a
// goredis.Error that isNoGroup recognises.
func TestReadConnMalformed(t *testing.T) {
	reply := resp([]any{[]any{"s", []any{
		[]any{"1-1", []any{"ferry-id", "a", "payload", "xyz"}},
		[]any{"1-2", []any{"h", "v"}},
	}}})
	for n := 1; n < len(reply); n++ {
		if got, err := decodeReply(reply[:n]); err == nil {
			t.Fatalf("the first %d of %d bytes decoded as %d messages without an error", n, len(reply), len(got))
		}
	}
	for name, bad := range map[string]string{
		"not an array":       "+OK\r\n",
		"bad length":         "*x\r\n",
		"negative length":    "*-2\r\n",
		"stream of 3":        "*1\r\n*3\r\n",
		"entry of 1":         "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*1\r\n",
		"odd fields":         "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*1\r\n$1\r\na\r\n",
		"integer for bulk":   "*1\r\n*2\r\n:1\r\n",
		"bulk longer":        "*1\r\n*2\r\n$5\r\ns\r\n",
		"no CRLF after bulk": "*1\r\n*2\r\n$1\r\nsXX*0\r\n",
		"LF alone":           "*1\n",
	} {
		if _, err := decodeReply([]byte(bad)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else if !strings.Contains(err.Error(), "malformed") && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want a malformed-reply error", name, err)
		}
	}
	_, err := decodeReply([]byte("-NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option\r\n"))
	if !isNoGroup(err) {
		t.Fatalf("error reply: %v, want one isNoGroup recognises", err)
	}
}

// FuzzReadConnReply: any bytes as a reply decode or fail, without a panic.
func FuzzReadConnReply(f *testing.F) {
	f.Add(resp([]any{[]any{"s", []any{[]any{"1-1", []any{"payload", "x", "ferry-id", "i"}}}}}))
	f.Add([]byte("*-1\r\n"))
	f.Add([]byte("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n"))
	f.Add([]byte("-ERR x\r\n"))
	f.Fuzz(func(t *testing.T, reply []byte) {
		_, _ = decodeReply(reply)
	})
}
