package transport

import (
	"strings"
	"time"
)

// A Key reads one query key as a transport's option of type O. A
// transport's url.go lists its keys once, as a table of Keys, and reads
// them with [Options]: a key's spelling, type and option are written in
// one place, and every transport reads its query the same way.
//
//	var keys = []transport.Key[Option]{
//		transport.IntKey("partitions", Partitions),
//		transport.DurationKey("ack_wait", AckWait),
//		transport.EnumKey("mode",
//			transport.Value("exclusive", ConsumeMode(ModeExclusive)),
//			transport.Value("shared", ConsumeMode(ModeShared))),
//	}
//	opts := transport.Options(q, keys...)
type Key[O any] struct {
	read func(q *Query) (O, bool)
}

// Options returns the option of every key of keys that q holds, in the
// order of keys. A malformed value is recorded for [Query.Err], which the
// caller checks after reading all its keys.
func Options[O any](q *Query, keys ...Key[O]) []O {
	var opts []O
	for _, k := range keys {
		if o, ok := k.read(q); ok {
			opts = append(opts, o)
		}
	}
	return opts
}

// StringKey maps key's text to opt.
func StringKey[O any](key string, opt func(string) O) Key[O] {
	return Key[O]{read: func(q *Query) (o O, ok bool) {
		if v, ok := q.String(key); ok {
			return opt(v), true
		}
		return o, false
	}}
}

// IntKey maps key's decimal integer to opt.
func IntKey[O any](key string, opt func(int) O) Key[O] {
	return Key[O]{read: func(q *Query) (o O, ok bool) {
		if n, ok := q.Int(key); ok {
			return opt(n), true
		}
		return o, false
	}}
}

// DurationKey maps key's Go duration ("250ms", "30s") to opt.
func DurationKey[O any](key string, opt func(time.Duration) O) Key[O] {
	return Key[O]{read: func(q *Query) (o O, ok bool) {
		if d, ok := q.Duration(key); ok {
			return opt(d), true
		}
		return o, false
	}}
}

// BoolKey maps key's boolean to opt.
func BoolKey[O any](key string, opt func(bool) O) Key[O] {
	return Key[O]{read: func(q *Query) (o O, ok bool) {
		if b, ok := q.Bool(key); ok {
			return opt(b), true
		}
		return o, false
	}}
}

// An EnumValue is one allowed value of an [EnumKey] and its option.
type EnumValue[O any] struct {
	name string
	opt  O
}

// Value pairs an allowed value of an [EnumKey] with its option.
func Value[O any](name string, opt O) EnumValue[O] { return EnumValue[O]{name, opt} }

// EnumKey maps each allowed value of key to its option. Any other value is
// recorded for [Query.Err] with the allowed values, in the order given.
func EnumKey[O any](key string, values ...EnumValue[O]) Key[O] {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = v.name
	}
	want := "want " + orList(names)
	return Key[O]{read: func(q *Query) (o O, ok bool) {
		v, given := q.String(key)
		if !given {
			return o, false
		}
		for _, e := range values {
			if e.name == v {
				return e.opt, true
			}
		}
		q.Fail(key, want)
		return o, false
	}}
}

// orList spells names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
