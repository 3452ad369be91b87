package transport_test

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// The fuzz targets of this file run their seed corpora (the f.Add calls)
// as ordinary tests; `go test ./transport -run '^$' -fuzz FuzzX`
// explores further. Each states the property it checks.

// secretMark is appended to every value, password and user name the
// targets build: no error and no redacted URL may show it.
const secretMark = "S3cretMarkZ"

// FuzzParseQuery: ParseQuery never panics on any raw query. Every value it
// reads (with secretMark appended to each value of the raw text) is the
// value url.QueryUnescape gives, its error wraps ErrInvalidOption, names
// a repeated key, and never shows a value. For two well-formed pairs
// written with url.QueryEscape, what String returns is the value written,
// byte for byte, and the typed getters agree with strconv and
// time.ParseDuration.
func FuzzParseQuery(f *testing.F) {
	for _, s := range [][5]string{
		{"n=4&d=250ms&b=true&s=a%20b&flag", "n", "4", "d", "250ms"},
		{"", "k", "v", "k", "v"},
		{"a=1&a=2", "partitions", "-3", "timeout", "1h2m"},
		{"%zz=1", "b", "TRUE", "b2", "yes"},
		{"x=%2", "", "", "k", "a&b=c"},
		{"&&&=&", "ünï", "\x00\xff", "k+", "v+ %"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, raw, k1, v1, k2, v2 string) {
		// Any raw text: no panic; an error wraps ErrInvalidOption and
		// shows no value.
		marked := markValues(raw)
		q := transport.ParseQuery("fz", marked)
		for part := range strings.SplitSeq(marked, "&") {
			k, _, _ := strings.Cut(part, "=")
			if key, err := url.QueryUnescape(k); err == nil {
				q.String(key)
			}
		}
		if err := q.Err(); err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("ParseQuery(%q).Err() = %v: not ErrInvalidOption", marked, err)
			}
			if strings.Contains(err.Error(), secretMark) {
				t.Fatalf("ParseQuery(%q).Err() shows a value: %v", marked, err)
			}
		}

		// Two pairs written by url.QueryEscape read back exactly.
		rawq := url.QueryEscape(k1) + "=" + url.QueryEscape(v1) + "&" + url.QueryEscape(k2) + "=" + url.QueryEscape(v2+secretMark)
		q = transport.ParseQuery("fz", rawq)
		if k1 == k2 {
			q.String(k1)
			err := q.Err()
			if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "more than once") {
				t.Fatalf("ParseQuery(%q): a repeated key gives %v", rawq, err)
			}
			if strings.Contains(err.Error(), secretMark) {
				t.Fatalf("ParseQuery(%q).Err() shows a value: %v", rawq, err)
			}
			return
		}
		if got, ok := q.String(k2); !ok || got != v2+secretMark {
			t.Fatalf("ParseQuery(%q).String(%q) = %q, %v; want %q", rawq, k2, got, ok, v2+secretMark)
		}
		checkTyped(t, q, k1, v1)
		if err := q.Err(); (err == nil) != typedOK(v1) {
			t.Fatalf("ParseQuery(%q).Err() = %v after reading %q as every type", rawq, err, v1)
		}

		// OptionsQuery: the same rule over a map; an unknown key is named.
		oq := transport.OptionsQuery("fz", map[string]string{k1: v1, k2: v2 + secretMark})
		if got, ok := oq.String(k1); !ok || got != v1 {
			t.Fatalf("OptionsQuery.String(%q) = %q, %v; want %q", k1, got, ok, v1)
		}
		err := oq.Err()
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), k2) {
			t.Fatalf("OptionsQuery with %q unread: Err() = %v; want ErrInvalidOption naming it", k2, err)
		}
		if strings.Contains(err.Error(), secretMark) && !strings.Contains(k2, secretMark) {
			t.Fatalf("OptionsQuery.Err() shows a value: %v", err)
		}
	})
}

// markValues appends secretMark to each value of raw (the text after the
// first '=' of each '&'-separated part).
func markValues(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok {
			parts[i] = k + "=" + v + secretMark
		}
	}
	return strings.Join(parts, "&")
}

// checkTyped reads key (whose value is v) with every typed getter and
// fails t where one disagrees with the standard library's parser.
func checkTyped(t *testing.T, q *transport.Query, key, v string) {
	if n, ok := q.Int(key); ok {
		if want, err := strconv.Atoi(v); err != nil || n != want {
			t.Fatalf("Int(%q) of %q = %d", key, v, n)
		}
	} else if _, err := strconv.Atoi(v); err == nil {
		t.Fatalf("Int(%q) refused %q", key, v)
	}
	if d, ok := q.Duration(key); ok {
		if want, err := time.ParseDuration(v); err != nil || d != want {
			t.Fatalf("Duration(%q) of %q = %v", key, v, d)
		}
	}
	if b, ok := q.Bool(key); ok {
		if want, err := strconv.ParseBool(v); err != nil || b != want {
			t.Fatalf("Bool(%q) of %q = %v", key, v, b)
		}
	}
}

// typedOK reports whether v is at once an integer, a duration and a
// boolean, as checkTyped's reads need for Err to stay nil ("0" and "1"
// are none: "1" is no duration).
func typedOK(v string) bool {
	_, e1 := strconv.Atoi(v)
	_, e2 := time.ParseDuration(v)
	_, e3 := strconv.ParseBool(v)
	return e1 == nil && e2 == nil && e3 == nil
}

// FuzzRedact: for any URL built from a scheme, a host, a path, a user
// name, a password and a query value, Redact and RedactString show
// neither the user name, nor the password, nor the query value (each
// carries secretMark), and keep the scheme and host. RedactString of any
// text never shows a password that url.Parse finds in it.
func FuzzRedact(f *testing.F) {
	for _, s := range [][6]string{
		{"redis", "127.0.0.1:6379", "/0", "shop", "s3cret", "tok"},
		{"nats", "h:4222", "", "", "", "x"},
		{"amqps", "[::1]:5671", "/vhost", "u@x", "p:w/", "endpoint=https://a:b@c"},
		{"sqs", "", "", "AKIA", "wJalr", "v"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], "redis://u:pw@h:1/0?token=abc")
	}
	f.Fuzz(func(t *testing.T, scheme, host, path, user, pass, value, raw string) {
		for _, part := range []string{scheme, host, path} {
			if strings.Contains(part, secretMark) {
				return // the marker in a public part would be shown, rightly
			}
		}
		u := &url.URL{Scheme: scheme, Host: host, Path: path,
			User:     url.UserPassword(user+secretMark, pass+secretMark),
			RawQuery: "token=" + url.QueryEscape(value+secretMark)}
		outs := []string{transport.Redact(u)}
		outs = append(outs, transport.RedactString(u.String()))
		for _, out := range outs {
			if strings.Contains(out, secretMark) || strings.Contains(out, url.QueryEscape(secretMark)) {
				t.Fatalf("Redact of %q = %q: shows a credential", u.String(), out)
			}
		}
		if r := transport.Redact(u); !strings.Contains(r, u.Scheme) {
			t.Fatalf("Redact(%q) = %q: the scheme is gone", u.String(), r)
		}

		// Any text: what url.Parse reads as the password is not shown.
		pu, err := url.Parse(raw)
		out := transport.RedactString(raw)
		if err != nil {
			if out != "<unparsable URL>" {
				t.Fatalf("RedactString(%q) = %q for text that does not parse", raw, out)
			}
			return
		}
		if strings.Contains(out, "@") {
			t.Fatalf("RedactString(%q) = %q: shows what stands before an '@' (user info, or an opaque part or path holding it)", raw, out)
		}
		if pu.User == nil {
			return
		}
		p, _ := pu.User.Password()
		if len(p) >= 3 && strings.Contains(out, p) && !strings.Contains(transport.Redact(&url.URL{Scheme: pu.Scheme, Host: pu.Host, Path: pu.Path}), p) {
			t.Fatalf("RedactString(%q) = %q: shows the password %q", raw, out, p)
		}
	})
}
