package memory

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/transport"
)

// FuzzParseURL: parse never panics; what it refuses is an error wrapping
// transport.ErrInvalidOption that does not show a query value (a marker
// appended to each must not appear); what it accepts, written back as
// memory://<name>?partitions=…&retention=…&max_payload=…, parses to the
// same configuration and names the same broker. The seed corpus runs as
// an ordinary test.
func FuzzParseURL(f *testing.F) {
	for _, u := range []string{
		"memory://",
		"memory://orders",
		"memory://orders?partitions=4&retention=1000&max_payload=1024",
		"MEMORY://x?partitions=65536",
		"memory://x?partitions=0",
		"memory://x?partitions=65537",
		"memory://x?retention=-1",
		"memory://x?partitions=2&partitions=2",
		"memory://u:p@x",
		"memory://x/path",
		"memory:opaque",
		"memory://x?bogus=1",
		"kafka://x",
		"memory://%zz",
	} {
		f.Add(u)
	}
	const mark = "V4lueMarkM"
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := parse(raw, nil)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("parse(%q): %v does not wrap ErrInvalidOption", raw, err)
			}
			if u, perr := url.Parse(raw); perr == nil && u.RawQuery != "" {
				parts := strings.Split(u.RawQuery, "&")
				for i, p := range parts {
					if k, v, ok := strings.Cut(p, "="); ok {
						parts[i] = k + "=" + v + mark
					}
				}
				u.RawQuery = strings.Join(parts, "&")
				if _, err := parse(u.String(), nil); err != nil && strings.Contains(err.Error(), mark) {
					t.Fatalf("parse(%q): the error shows a query value: %v", u.String(), err)
				}
			}
			return
		}
		u, _ := url.Parse(raw)
		name := brokerName(u)
		w := url.URL{Scheme: Scheme, Host: u.Host, Opaque: u.Opaque,
			RawQuery: fmt.Sprintf("partitions=%d&retention=%d&max_payload=%d", cfg.partitions, cfg.retention, cfg.maxPayload)}
		again := w.String()
		cfg2, err := parse(again, nil)
		if err != nil {
			t.Fatalf("parse(%q) accepted; %q is refused: %v", raw, again, err)
		}
		u2, _ := url.Parse(again)
		if cfg2 != cfg || brokerName(u2) != name {
			t.Fatalf("parse(%q) = %+v, broker %q; %q gives %+v, broker %q", raw, cfg, name, again, cfg2, brokerName(u2))
		}
		if cfg.partitions < 1 || cfg.partitions > 65536 || cfg.retention < 0 || cfg.maxPayload < 0 {
			t.Fatalf("parse(%q) accepted %+v", raw, cfg)
		}
	})
}
