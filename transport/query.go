package transport

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Query reads text settings, a URL's query or [Subscription.Options], under
// the one rule every transport follows: each key at most once, every key
// known, every value well formed. A transport's url.go reads each key it
// knows with a typed getter and turns the value into its typed Option; then
// [Query.Err] reports the first malformed or repeated key, or else every key
// that no getter asked for. All errors wrap [ErrInvalidOption], name the
// key, and never repeat its value (a value may be a secret).
//
//	q := transport.ParseQuery("memory", u.RawQuery)
//	var opts []Option
//	if n, ok := q.Int("partitions"); ok {
//		opts = append(opts, Partitions(n))
//	}
//	if err := q.Err(); err != nil {
//		return nil, err
//	}
//
// A Query is not safe for concurrent use. It is made once per Open or
// Subscribe, never on the message path.
type Query struct {
	scheme string
	vals   map[string]string
	asked  map[string]bool
	err    error
}

// ParseQuery parses rawQuery (a URL's RawQuery) for the transport named by
// scheme. A key given twice, or an escape that does not decode, is recorded
// and reported by [Query.Err].
func ParseQuery(scheme, rawQuery string) *Query {
	q := &Query{scheme: scheme, vals: map[string]string{}, asked: map[string]bool{}}
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			q.fail("a query key or value is not validly %%-escaped")
			continue
		}
		if _, dup := q.vals[key]; dup {
			q.fail("query key %q given more than once", key)
			continue
		}
		q.vals[key] = val
	}
	return q
}

// OptionsQuery wraps opts ([Subscription.Options]) in a Query for the
// transport named by scheme, so that subscription settings follow the same
// rule as URL keys. opts is only read.
func OptionsQuery(scheme string, opts map[string]string) *Query {
	q := &Query{scheme: scheme, vals: make(map[string]string, len(opts)), asked: map[string]bool{}}
	for k, v := range opts {
		q.vals[k] = v
	}
	return q
}

func (q *Query) fail(format string, args ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidOption, q.scheme}, args...)...)
	}
}

// Has reports whether key was given, and marks it known.
func (q *Query) Has(key string) bool {
	q.asked[key] = true
	_, ok := q.vals[key]
	return ok
}

// String returns key's value and whether it was given.
func (q *Query) String(key string) (string, bool) {
	q.asked[key] = true
	v, ok := q.vals[key]
	return v, ok
}

// Int returns key's value as a decimal integer. ok is false if the key was
// not given or its value is not an integer (recorded for Err).
func (q *Query) Int(key string) (n int, ok bool) {
	v, given := q.String(key)
	if !given {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		q.fail("query key %q: want an integer", key)
		return 0, false
	}
	return n, true
}

// Duration returns key's value as a Go duration ("250ms", "30s"). ok is
// false if the key was not given or is malformed (recorded for Err).
func (q *Query) Duration(key string) (d time.Duration, ok bool) {
	v, given := q.String(key)
	if !given {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		q.fail("query key %q: want a duration such as 500ms or 30s", key)
		return 0, false
	}
	return d, true
}

// Bool returns key's value as a boolean (1, t, true, 0, f, false, any
// case). ok is false if the key was not given or is malformed (recorded for
// Err).
func (q *Query) Bool(key string) (b bool, ok bool) {
	v, given := q.String(key)
	if !given {
		return false, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		q.fail("query key %q: want true or false", key)
		return false, false
	}
	return b, true
}

// Fail records a problem with key's value found by the caller (a value out
// of an enumeration, say), reported by Err. reason must not contain the
// value.
func (q *Query) Fail(key, reason string) { q.fail("query key %q: %s", key, reason) }

// Err returns the first malformed, repeated or failed key, or else an error
// naming every key that no getter asked for (and the keys that were asked
// for), or nil. Call it after reading every known key.
func (q *Query) Err() error {
	if q.err != nil {
		return q.err
	}
	var unknown, known []string
	for k := range q.vals {
		if !q.asked[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	for k := range q.asked {
		known = append(known, k)
	}
	sort.Strings(unknown)
	sort.Strings(known)
	if len(known) == 0 {
		return fmt.Errorf("%w: %s: unknown option(s) %s (it takes none)", ErrInvalidOption, q.scheme, strings.Join(unknown, ", "))
	}
	return fmt.Errorf("%w: %s: unknown option(s) %s (known: %s)", ErrInvalidOption, q.scheme,
		strings.Join(unknown, ", "), strings.Join(known, ", "))
}

// Redact returns u as text safe to print in an error or a log line: the
// scheme, host and path only. User name, password and query are left out,
// since any of them may hold a credential (a password, a token, an endpoint
// with its own user-info). So are an opaque part and a path that hold an
// '@' or a ':' (shown as "…"): text that is not scheme://user@host, such as
// "redis:user:pass@host" or "tcp//user:pass@host", puts its credentials
// there. The result never holds an '@'.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.Opaque != "" {
		r.Opaque = "…"
	}
	if strings.ContainsAny(u.Path, "@:") {
		r.Path = "/…"
	}
	return r.String()
}

// RedactString parses rawURL and returns [Redact] of it, or a placeholder if
// it does not parse (never the text itself).
func RedactString(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	return Redact(u)
}
