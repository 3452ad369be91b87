package transport_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

func TestOptionsKeys(t *testing.T) {
	keys := []transport.Key[string]{
		transport.StringKey("name", func(s string) string { return "name=" + s }),
		transport.IntKey("n", func(n int) string { return fmt.Sprint("n=", n) }),
		transport.DurationKey("d", func(d time.Duration) string { return "d=" + d.String() }),
		transport.BoolKey("b", func(b bool) string { return fmt.Sprint("b=", b) }),
		transport.EnumKey("mode", transport.Value("exclusive", "mode=x"), transport.Value("shared", "mode=s")),
	}
	q := transport.ParseQuery("x", "mode=shared&b=true&d=2s&n=7&name=a")
	got := strings.Join(transport.Options(q, keys...), " ")
	if err := q.Err(); err != nil || got != "name=a n=7 d=2s b=true mode=s" {
		t.Fatalf("Options = %q, %v; want the keys' options in the table's order", got, err)
	}
	q = transport.ParseQuery("x", "n=1")
	if got := transport.Options(q, keys...); len(got) != 1 || q.Err() != nil {
		t.Fatalf("Options of one key = %q, %v", got, q.Err())
	}
	for raw, want := range map[string]string{
		"mode=both": `query key "mode": want exclusive or shared`,
		"n=x":       `query key "n": want an integer`,
		"d=5":       `query key "d": want a duration`,
		"b=maybe":   `query key "b": want true or false`,
		"other=1":   "unknown option(s) other",
	} {
		q := transport.ParseQuery("x", raw)
		if got := transport.Options(q, keys...); len(got) != 0 {
			t.Errorf("%s: Options = %q, want none", raw, got)
		}
		if err := q.Err(); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Err = %v, want %q", raw, err, want)
		}
	}
}
