package mqtt

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reads the envelope: a strict JSON parser for its one shape,
// run once per received message.

// envParser reads one JSON envelope strictly: every field known, none
// twice, nothing after it, text valid UTF-8.
type envParser struct {
	b []byte
	i int
}

func (e *envelope) parse(b []byte) error {
	p := envParser{b: b}
	version, haveVersion := uint64(0), false
	var seen uint8
	if !p.skip('{') {
		return p.fail("want a JSON object")
	}
	if !p.skip('}') {
		for {
			raw, escaped, err := p.raw()
			if err != nil {
				return err
			}
			if escaped {
				u, err := unescape(raw)
				if err != nil {
					return p.fail(err.Error())
				}
				raw = []byte(u)
			}
			if !p.skip(':') {
				return p.fail("want ':' after a field name")
			}
			f := envField(raw)
			if f == 0 {
				return fmt.Errorf("unknown field %q", raw)
			}
			if seen&f != 0 {
				return fmt.Errorf("field %q given twice", raw)
			}
			seen |= f
			if p.null() {
				if f == fieldFerry {
					return p.fail("ferry is null")
				}
			} else {
				switch f {
				case fieldFerry:
					version, err = p.uint()
					haveVersion = true
				case fieldID:
					e.id, err = p.str()
				case fieldKey:
					e.key, err = p.str()
				case fieldPub:
					var b []byte
					b, err = p.plain()
					e.pub = b
				case fieldSeq:
					e.seq, err = p.uint()
				case fieldHeaders:
					e.headers, err = p.headers()
				case fieldPayload:
					e.payload, err = p.base64()
				case fieldText:
					e.payload, err = p.text()
				}
				if err != nil {
					return err
				}
			}
			if p.skip(',') {
				continue
			}
			if p.skip('}') {
				break
			}
			return p.fail("want ',' or '}'")
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return p.fail("trailing data after the envelope")
	}
	switch {
	case !haveVersion:
		return errors.New("no ferry version field (not an envelope)")
	case version != EnvelopeVersion:
		return fmt.Errorf("version %d, want %d", version, EnvelopeVersion)
	case e.id == "":
		return errors.New("no id")
	case seen&fieldText != 0 && seen&fieldPayload != 0:
		return errors.New("both text and payload")
	}
	return nil
}

// The envelope's fields, as bits of a set.
const (
	fieldFerry uint8 = 1 << iota
	fieldID
	fieldKey
	fieldHeaders
	fieldPayload
	fieldPub
	fieldSeq
	fieldText
)

// envField returns name's bit, or 0 for a field the envelope does not
// have.
func envField(name []byte) uint8 {
	switch string(name) { // no allocation
	case "ferry":
		return fieldFerry
	case "id":
		return fieldID
	case "key":
		return fieldKey
	case "headers":
		return fieldHeaders
	case "payload":
		return fieldPayload
	case "pub":
		return fieldPub
	case "seq":
		return fieldSeq
	case "text":
		return fieldText
	}
	return 0
}

func (p *envParser) fail(what string) error {
	return fmt.Errorf("%s at byte %d", what, p.i)
}

func (p *envParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// skip consumes c, after white space, and reports whether it was there.
func (p *envParser) skip(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *envParser) null() bool {
	p.ws()
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// uint reads a non-negative integer without sign, fraction or exponent.
func (p *envParser) uint() (uint64, error) {
	p.ws()
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n, err := strconv.ParseUint(string(p.b[start:p.i]), 10, 64)
	if err != nil || (p.i-start > 1 && p.b[start] == '0') {
		return 0, p.fail("want a non-negative integer")
	}
	return n, nil
}

// stopString marks the bytes that end the plain run of a JSON string:
// the closing quote, an escape, and control characters (not allowed).
var stopString = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// raw reads a JSON string and returns its text still escaped, and whether
// it has escapes. It runs over every byte of the payload, so it keeps its
// position in a local.
func (p *envParser) raw() ([]byte, bool, error) {
	p.ws()
	b, i := p.b, p.i
	if i >= len(b) || b[i] != '"' {
		return nil, false, p.fail("want a string")
	}
	i++
	start, escaped := i, false
	for {
		for i < len(b) && !stopString[b[i]] {
			i++
		}
		if i >= len(b) {
			p.i = i
			return nil, false, p.fail("unterminated string")
		}
		switch b[i] {
		case '"':
			p.i = i + 1
			return b[start:i], escaped, nil
		case '\\':
			escaped = true
			i += 2
		default:
			p.i = i
			return nil, false, p.fail("control character in a string")
		}
	}
}

// plain reads a JSON string without escapes, valid UTF-8, as a slice of
// the input (the publisher ID, which the gap tracker looks up without
// allocating).
func (p *envParser) plain() ([]byte, error) {
	s, escaped, err := p.raw()
	switch {
	case err != nil:
		return nil, err
	case escaped:
		return nil, p.fail("pub: escapes are not allowed")
	case !utf8.Valid(s):
		return nil, p.fail("string is not valid UTF-8")
	}
	return s, nil
}

// str reads a JSON string.
func (p *envParser) str() (string, error) {
	s, escaped, err := p.raw()
	if err != nil {
		return "", err
	}
	if !escaped {
		if !utf8.Valid(s) {
			return "", p.fail("string is not valid UTF-8")
		}
		return string(s), nil
	}
	out, err := unescape(s)
	if err != nil {
		return "", p.fail(err.Error())
	}
	return out, nil
}

// unescape decodes the escapes of a JSON string's text.
func unescape(s []byte) (string, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n <= 1 {
				return "", errors.New("string is not valid UTF-8")
			}
			out = append(out, s[i:i+n]...)
			i += n
			continue
		}
		if i+1 >= len(s) {
			return "", errors.New("bad escape")
		}
		switch s[i+1] {
		case '"', '\\', '/':
			out = append(out, s[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return "", errors.New("bad \\u escape")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2, ok = hex4(s[i+2:])
				}
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return "", errors.New("lone UTF-16 surrogate in a \\u escape")
				}
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", errors.New("bad escape")
		}
		i += 2
	}
	return string(out), nil
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s[:4]), 16, 32)
	return rune(n), err == nil
}

// headers reads an object of strings.
func (p *envParser) headers() (map[string]string, error) {
	if !p.skip('{') {
		return nil, p.fail("headers: want an object")
	}
	h := make(map[string]string)
	if p.skip('}') {
		return h, nil
	}
	for {
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := h[k]; dup {
			return nil, fmt.Errorf("header %q given twice", k)
		}
		if !p.skip(':') {
			return nil, p.fail("headers: want ':'")
		}
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		h[k] = v
		if p.skip(',') {
			continue
		}
		if p.skip('}') {
			return h, nil
		}
		return nil, p.fail("headers: want ',' or '}'")
	}
}

// text reads a JSON string as bytes.
func (p *envParser) text() ([]byte, error) {
	s, escaped, err := p.raw()
	switch {
	case err != nil:
		return nil, err
	case escaped:
		u, err := unescape(s)
		if err != nil {
			return nil, p.fail(err.Error())
		}
		return []byte(u), nil
	case !utf8.Valid(s):
		return nil, p.fail("string is not valid UTF-8")
	}
	return append(make([]byte, 0, len(s)), s...), nil
}

// base64 reads a string of standard base64 (the encoding of a JSON []byte).
func (p *envParser) base64() ([]byte, error) {
	s, escaped, err := p.raw()
	if err != nil {
		return nil, err
	}
	if escaped {
		u, err := unescape(s)
		if err != nil {
			return nil, p.fail(err.Error())
		}
		s = []byte(u)
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(out, s)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return out[:n], nil
}
