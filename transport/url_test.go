package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/transport"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw, want, err string
	}{
		{raw: "REDISS://h:1", want: "rediss"},
		{raw: "redis://u:p@h", want: "redis"},
		{raw: "amqp://h", err: `scheme "amqp" is not "redis" or "rediss"`},
		{raw: "redis:opaque", err: "want redis://host"},
		{raw: "redis://u:s3cret%zz@h", err: "cannot parse the URL"},
	} {
		u, err := transport.ParseURL("x", tc.raw, "redis", "rediss")
		if tc.err != "" {
			if err == nil || !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %v, want an ErrInvalidOption with %q", tc.raw, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("ParseURL(%q): the error repeats the password: %v", tc.raw, err)
			}
			continue
		}
		if err != nil || u.Scheme != tc.want {
			t.Errorf("ParseURL(%q) = %v, %v; want scheme %q", tc.raw, u, err, tc.want)
		}
	}
}

func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		bad       bool
	}{
		{raw: "nats://", want: ""},
		{raw: "nats://h", want: "h:4222"},
		{raw: "nats://h:1", want: "h:1"},
		{raw: "nats://[::1]", want: "[::1]:4222"},
		{raw: "nats://u:s3cret@h:0", bad: true},
		{raw: "nats://h:65536", bad: true},
		{raw: "nats://:5", bad: true},
	} {
		u, err := transport.ParseURL("x", tc.raw, "nats")
		if err != nil {
			t.Fatal(err)
		}
		got, err := transport.HostPort("x", u, "4222")
		if tc.bad {
			if !errors.Is(err, transport.ErrInvalidOption) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("HostPort(%q) = %q, %v; want an ErrInvalidOption without the password", tc.raw, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}
