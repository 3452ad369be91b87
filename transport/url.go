package transport

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ParseURL parses rawURL for the transport called name (the prefix of its
// errors) and checks that its scheme is one of schemes, in any case; the
// URL it returns has its Scheme in lower case. It is the first step of
// every transport's url.go, before [ParseQuery] reads the query.
//
// Its errors wrap [ErrInvalidOption] and never repeat rawURL: the
// *url.Error of a URL that does not parse quotes it whole, password
// included. An opaque URL (scheme:rest, without "//") is an error.
func ParseURL(name, rawURL string, schemes ...string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not wrapped: url.Error repeats the URL, password included.
		return nil, fmt.Errorf("%w: %s: cannot parse the URL (a reserved character in a user or password must be %%-escaped)", ErrInvalidOption, name)
	}
	scheme := strings.ToLower(u.Scheme)
	if !slices.Contains(schemes, scheme) {
		return nil, fmt.Errorf("%w: %s: scheme %q is not %s", ErrInvalidOption, name, u.Scheme, quoteOr(schemes))
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: %s: want %s://host…", ErrInvalidOption, name, scheme)
	}
	u.Scheme = scheme
	return u, nil
}

// HostPort returns the URL's host and port as one address for net.Dial,
// with defaultPort where the URL gives none, and "" when the URL names no
// host (the transport's default address applies). A host that is empty
// beside a port, a port outside 1 to 65535, or an IPv6 address without
// brackets is an error wrapping [ErrInvalidOption] that names the URL
// without its user info ([Redact]).
func HostPort(name string, u *url.URL, defaultPort string) (string, error) {
	if u.Host == "" {
		return "", nil
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); host == "" || err != nil || n < 1 || n > 65535 ||
		(strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[")) {
		return "", fmt.Errorf("%w: %s: %s: want host[:port] with a port from 1 to 65535, an IPv6 address in brackets",
			ErrInvalidOption, name, Redact(u))
	}
	return net.JoinHostPort(host, port), nil
}

// quoteOr spells schemes as `"a"`, `"a" or "b"`, `"a", "b" or "c"`.
func quoteOr(schemes []string) string {
	q := make([]string, len(schemes))
	for i, s := range schemes {
		q[i] = strconv.Quote(s)
	}
	return orList(q)
}
