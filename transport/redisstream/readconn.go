package redisstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ferrymq/ferry/handler"
)

// The read of new entries (XREADGROUP … STREAMS … >) is the consumer's
// hot path, and it runs on a connection of the fetch goroutine's own,
// which this file speaks RESP2 over, rather than through go-redis. The
// reply is decoded as it arrives: each payload is read straight from the
// socket's buffer into a slice of its own (so a payload a handler keeps
// keeps nothing else alive), and every other string of a batch (IDs,
// keys, header names and values) into one shared string. go-redis's
// XReadGroup builds a map of interface values per entry (thirteen
// allocations per message of three fields) and, on the project's two
// vCPUs, left the fetch goroutine, and with it Ferry's consumer, at 0.8
// of a raw go-redis loop; BenchmarkConsumeVsRaw measures both.
//
// The connection is dialed like go-redis's (the same dialer, so TLS,
// Timeout and the test proxies apply), then authenticated, given its
// database and named as go-redis would (AUTH, SELECT, CLIENT SETNAME).
// Any failure closes it, and the next read dials again. As with the read
// client before, nothing is retried: an XREADGROUP whose reply is lost
// may have moved entries into this consumer's pending list, and the
// caller re-reads that list (fetch.go).
//
// The other reads (the pending list, XAUTOCLAIM, takeovers) are rare and
// stay on go-redis.

// replyError is an error reply of Redis (a line starting with '-'). It
// implements go-redis's Error, so errors.As finds it as it finds
// go-redis's own (isNoGroup).
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a reply of the server (goredis.Error).
func (replyError) RedisError() {}

var _ goredis.Error = replyError("")

// readConn is the fetch goroutine's connection; only that goroutine uses
// it, and Close.
type readConn struct {
	cfg  *config
	conn net.Conn
	br   *bufio.Reader
	wbuf []byte

	// One reply's decoding. The arena is new for each reply (the batch's
	// strings stay in it); the slices are reused.
	arena     []byte
	arenaHint int // the last arena's size
	keys      []span
	entries   []rawEntry
	hdrs      []hdrSpan
}

// span is a string of the arena: arena[off : off+n].
type span struct{ off, n int }

// of returns the span's string in arena.
func (sp span) of(arena string) string { return arena[sp.off : sp.off+sp.n] }

type hdrSpan struct{ name, val span }

// rawEntry is one entry of a reply, its strings in the arena.
type rawEntry struct {
	stream     int // the index of its stream key among the reply's
	id         span
	msgID, key span
	payload    []byte
	hdrs       int // index of its first header in readConn.hdrs
	nh         int
}

// readBufSize is the connection's read buffer: a reply of COUNT 100
// entries of 1 KiB in a few reads.
const readBufSize = 64 << 10

// close drops the connection; the next read dials again.
func (c *readConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// connect dials and sets the connection up, each step within the Timeout
// and ctx.
func (c *readConn) connect(ctx context.Context) error {
	conn, err := c.cfg.dial(ctx, "tcp", c.cfg.addr)
	if err != nil {
		return err
	}
	c.conn, c.br = conn, bufio.NewReaderSize(conn, readBufSize)
	var setup [][]string
	if c.cfg.password != "" { // as go-redis: AUTH only with a password
		if c.cfg.username != "" {
			setup = append(setup, []string{"AUTH", c.cfg.username, c.cfg.password})
		} else {
			setup = append(setup, []string{"AUTH", c.cfg.password})
		}
	}
	if c.cfg.db != 0 {
		setup = append(setup, []string{"SELECT", strconv.Itoa(c.cfg.db)})
	}
	if c.cfg.clientName != "" {
		setup = append(setup, []string{"CLIENT", "SETNAME", c.cfg.clientName})
	}
	for _, args := range setup {
		if err := c.simple(ctx, args); err != nil {
			c.close()
			// Only the command's name is shown, never its arguments; a
			// refusal names no credential.
			var refused replyError
			if args[0] == "AUTH" && errors.As(err, &refused) {
				return fmt.Errorf("%w: %w", ErrAuth, err)
			}
			return fmt.Errorf("%s: %w", args[0], err)
		}
	}
	return nil
}

// simple sends a set-up command and reads its status reply.
func (c *readConn) simple(ctx context.Context, args []string) error {
	deadline := time.Now().Add(c.cfg.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.send(deadline, args...); err != nil {
		return err
	}
	l, err := c.line()
	if err != nil {
		return err
	}
	if l[0] != '+' {
		return fmt.Errorf("unexpected reply %q", l[0])
	}
	return nil
}

// send writes one command, as a RESP array of bulk strings.
func (c *readConn) send(deadline time.Time, args ...string) error {
	if err := c.conn.SetDeadline(deadline); err != nil {
		return err
	}
	b := append(c.wbuf[:0], '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	c.wbuf = b
	_, err := c.conn.Write(b)
	return err
}

// line reads one line of the reply, without its CRLF; it is valid until
// the next read. An error reply is returned as a replyError.
func (c *readConn) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errMalformed("a line longer than the read buffer")
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, errMalformed("a line without CRLF")
	}
	l = l[:len(l)-2]
	if l[0] == '-' {
		return nil, replyError(l[1:])
	}
	return l, nil
}

func errMalformed(what string) error {
	return fmt.Errorf("redisstream: malformed XREADGROUP reply: %s", what)
}

// length reads a header line of type typ ('*' or '$') and returns its
// length; -1 is null.
func (c *readConn) length(typ byte) (int, error) {
	l, err := c.line()
	if err != nil {
		return 0, err
	}
	if l[0] != typ {
		return 0, errMalformed(fmt.Sprintf("type %q where %q belongs", l[0], typ))
	}
	n, err := strconv.Atoi(unsafe.String(unsafe.SliceData(l[1:]), len(l)-1))
	if err != nil || n < -1 {
		return 0, errMalformed(fmt.Sprintf("length %q", l))
	}
	return n, nil
}

// bulk reads a bulk string into the arena; null is empty.
func (c *readConn) bulk() (span, error) {
	n, err := c.length('$')
	if err != nil || n < 0 {
		return span{}, err
	}
	off := len(c.arena)
	c.arena = append(c.arena, make([]byte, n)...)
	if _, err := io.ReadFull(c.br, c.arena[off:]); err != nil {
		return span{}, err
	}
	return span{off, n}, c.crlf()
}

// bulkBytes reads a bulk string into a slice of its own; null is empty.
func (c *readConn) bulkBytes() ([]byte, error) {
	n, err := c.length('$')
	if err != nil || n < 0 {
		return []byte{}, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return nil, err
	}
	return p, c.crlf()
}

// crlf reads the CRLF that ends a bulk string.
func (c *readConn) crlf() error {
	b, err := c.br.Peek(2)
	if err != nil {
		return err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return errMalformed("a bulk string not ended by CRLF")
	}
	_, err = c.br.Discard(2)
	return err
}

// takeArena hands the last reply's arena over as a string: the strings
// of its batch share it, and it is never written again.
func (c *readConn) takeArena() string {
	a := unsafe.String(unsafe.SliceData(c.arena), len(c.arena))
	c.arena = nil
	return a
}

// message fills m's ID, Key, Payload and Headers from e, an entry of the
// last reply whose arena is arena, and returns the entry's ID.
func (c *readConn) message(m *handler.Message, e *rawEntry, arena string) string {
	m.ID, m.Key, m.Payload = e.msgID.of(arena), e.key.of(arena), e.payload
	if e.nh > 0 {
		m.Headers = make(map[string]string, e.nh)
		for _, h := range c.hdrs[e.hdrs : e.hdrs+e.nh] {
			m.Headers[h.name.of(arena)] = h.val.of(arena)
		}
	}
	return e.id.of(arena)
}

// is reports whether the arena's sp is s.
func (c *readConn) is(sp span, s string) bool {
	return string(c.arena[sp.off:sp.off+sp.n]) == s
}

// xreadgroup sends args (XREADGROUP … > with BLOCK block) and decodes the
// reply into c.keys, c.entries and c.arena. The reply is due within
// block, and given up on after Timeout more, or when ctx ends.
func (c *readConn) xreadgroup(ctx context.Context, block time.Duration, args []string) error {
	c.arena = make([]byte, 0, c.arenaHint)
	c.keys, c.entries, c.hdrs = c.keys[:0], c.entries[:0], c.hdrs[:0]
	if c.conn == nil {
		if err := c.connect(ctx); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(block + c.cfg.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A ctx ending early (Close) interrupts the read.
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	err := c.decode(deadline, args)
	c.arenaHint = max(c.arenaHint*7/8, len(c.arena))
	if !stop() || err != nil {
		c.close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return err
}

func (c *readConn) decode(deadline time.Time, args []string) error {
	if err := c.send(deadline, args...); err != nil {
		return err
	}
	n, err := c.length('*')
	if err != nil || n <= 0 {
		return err // null: BLOCK ran out
	}
	for si := range n {
		if k, err := c.length('*'); err != nil {
			return err
		} else if k != 2 {
			return errMalformed(fmt.Sprintf("a stream of %d elements", k))
		}
		key, err := c.bulk()
		if err != nil {
			return err
		}
		c.keys = append(c.keys, key)
		m, err := c.length('*')
		if err != nil {
			return err
		}
		for range m {
			if k, err := c.length('*'); err != nil {
				return err
			} else if k != 2 {
				return errMalformed(fmt.Sprintf("an entry of %d elements", k))
			}
			e := rawEntry{stream: si, hdrs: len(c.hdrs)}
			if e.id, err = c.bulk(); err != nil {
				return err
			}
			nf, err := c.length('*')
			if err != nil {
				return err
			}
			if nf > 0 && nf%2 != 0 {
				return errMalformed(fmt.Sprintf("an entry of %d fields and values", nf))
			}
			for range max(nf, 0) / 2 {
				name, err := c.bulk()
				if err != nil {
					return err
				}
				if c.is(name, FieldPayload) {
					c.arena = c.arena[:name.off] // the name is not kept
					if e.payload, err = c.bulkBytes(); err != nil {
						return err
					}
					continue
				}
				val, err := c.bulk()
				if err != nil {
					return err
				}
				switch {
				case c.is(name, FieldID):
					e.msgID = val
				case c.is(name, FieldKey):
					e.key = val
				default:
					c.hdrs = append(c.hdrs, hdrSpan{name, val})
				}
			}
			e.nh = len(c.hdrs) - e.hdrs
			c.entries = append(c.entries, e)
		}
	}
	return nil
}
