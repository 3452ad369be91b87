package transport_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

func TestQueryReadsTypedValues(t *testing.T) {
	q := transport.ParseQuery("x", "n=4&d=250ms&b=true&s=a%20b&flag")
	if n, ok := q.Int("n"); !ok || n != 4 {
		t.Fatalf("Int = %d, %v", n, ok)
	}
	if d, ok := q.Duration("d"); !ok || d != 250*time.Millisecond {
		t.Fatalf("Duration = %s, %v", d, ok)
	}
	if b, ok := q.Bool("b"); !ok || !b {
		t.Fatalf("Bool = %v, %v", b, ok)
	}
	if s, ok := q.String("s"); !ok || s != "a b" {
		t.Fatalf("String = %q, %v", s, ok)
	}
	if !q.Has("flag") {
		t.Fatal("Has(flag) = false")
	}
	if _, ok := q.Int("absent"); ok {
		t.Fatal("an absent key reads as given")
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestQueryErrorsNameTheKeyNotTheValue(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		read func(*transport.Query)
		says string
	}{
		{"n=4&n=5", func(q *transport.Query) { q.Int("n") }, `"n" given more than once`},
		{"n=secret", func(q *transport.Query) { q.Int("n") }, `"n": want an integer`},
		{"d=secret", func(q *transport.Query) { q.Duration("d") }, `"d": want a duration`},
		{"b=secret", func(q *transport.Query) { q.Bool("b") }, `"b": want true or false`},
		{"n=1&colour=secret&zone=secret", func(q *transport.Query) { q.Int("n") }, "unknown option(s) colour, zone (known: n)"},
		{"colour=secret", func(*transport.Query) {}, "unknown option(s) colour (it takes none)"},
		{"n=%zz", func(q *transport.Query) { q.Int("n") }, "escaped"},
		{"mode=secret", func(q *transport.Query) {
			if v, _ := q.String("mode"); v != "a" {
				q.Fail("mode", "want a or b")
			}
		}, `"mode": want a or b`},
	} {
		q := transport.ParseQuery("x", tc.raw)
		tc.read(q)
		err := q.Err()
		if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrInvalidOption saying %q", tc.raw, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error repeats a value: %v", tc.raw, err)
		}
	}
}

func TestOptionsQueryFollowsTheSameRule(t *testing.T) {
	q := transport.OptionsQuery("x", map[string]string{"shards": "4", "oops": "1"})
	if n, ok := q.Int("shards"); !ok || n != 4 {
		t.Fatalf("shards = %d", n)
	}
	if err := q.Err(); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("Err = %v", err)
	}
}

func TestRedactDropsUserInfoAndQuery(t *testing.T) {
	u, _ := url.Parse("amqp://user:pw1@host:5672/vhost?token=pw2&endpoint=http%3A%2F%2Fa%3Apw3%40b")
	got := transport.Redact(u)
	if got != "amqp://host:5672/vhost" {
		t.Fatalf("Redact = %q", got)
	}
	if s := transport.RedactString("::not a url pw4"); strings.Contains(s, "pw4") {
		t.Fatalf("RedactString leaks: %q", s)
	}
}
