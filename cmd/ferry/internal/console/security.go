package console

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Header names of the write protections.
const (
	// HeaderToken carries the operator token (Config.Token).
	HeaderToken = "X-Ferry-Token"
	// HeaderCSRF carries the CSRF token of GET /api/session.
	HeaderCSRF = "X-Ferry-CSRF"
)

// contentSecurityPolicy allows the console's own script, style and API and
// nothing else: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// guard sets the security headers on every response and, on loopback,
// refuses a request whose Host is not a loopback name (DNS rebinding).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.loopback && !loopbackHostHeader(r.Host) {
			writeError(w, http.StatusForbidden, "console: this console answers only to a loopback host name (127.0.0.1, localhost, [::1])")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkWrite reports whether the write request r may proceed, and answers
// it with the refusal when not: POST with a JSON body, from the same
// origin, with the CSRF token, and with the operator token when one is
// configured (required beyond loopback).
func (s *Server) checkWrite(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "console: a write action is a POST")
		return false
	}
	if !s.Writable() {
		writeError(w, http.StatusForbidden, "console: read-only: this console listens beyond loopback without a token (start it with --token or FERRY_CONSOLE_TOKEN)")
		return false
	}
	if s.cfg.Token != "" && !equalSecret(r.Header.Get(HeaderToken), s.cfg.Token) {
		writeError(w, http.StatusUnauthorized, "console: this write action needs the operator token ("+HeaderToken+")")
		return false
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		writeError(w, http.StatusForbidden, "console: cross-site request refused")
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		writeError(w, http.StatusForbidden, "console: cross-origin request refused")
		return false
	}
	if !equalSecret(r.Header.Get(HeaderCSRF), s.csrf) {
		writeError(w, http.StatusForbidden, "console: missing or wrong CSRF token ("+HeaderCSRF+"): reload the page")
		return false
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "console: a write action takes application/json")
		return false
	}
	return true
}

// equalSecret compares a presented secret with the expected one in
// constant time; an empty expected secret matches nothing.
func equalSecret(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// sameOrigin reports whether the Origin header o names host.
func sameOrigin(o, host string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// loopbackHostHeader reports whether a Host header names a loopback host.
func loopbackHostHeader(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return isLoopbackHost(host)
}
