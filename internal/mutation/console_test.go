package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// The ferry console's mutants (issue 27): each security property of the
// page and its API is killed by a named test of cmd/ferry/internal/console.
// The page's mutant edits the embedded JavaScript: the overlay applies to
// embedded files too, and the browser test runs the mutated page in
// headless Chromium. Two more bugs were injected once by hand and caught,
// and are not kept here to save the kit's time: the Host check dropped on
// loopback (TestWriteGuards, "rebound host name") and error texts sent to
// the page without the secrets replaced (TestNoCredentials).
const consolePkg = "./cmd/ferry/internal/console"

func init() {
	register("console", []Mutant{
		{
			Name: "payload-as-html", // the payload put in the page as HTML
			Pkg:  consolePkg, File: "cmd/ferry/internal/console/static/app.js",
			Find:    `$("detail-payload").textContent = l.payload;`,
			Replace: `$("detail-payload").innerHTML = l.payload;`,
			Run:     "^TestBrowser$",
			Want:    "payload shown as",
			Requires: func(tb testing.TB) {
				transporttest.RequireBroker(tb, "redis", "127.0.0.1:6379")
			},
		},
		{
			Name: "no-token-beyond-loopback", // the operator token not checked
			Pkg:  consolePkg, File: "cmd/ferry/internal/console/security.go",
			Find:    `if s.cfg.Token != "" && !equalSecret(r.Header.Get(HeaderToken), s.cfg.Token) {`,
			Replace: `if false && !equalSecret(r.Header.Get(HeaderToken), s.cfg.Token) {`,
			Run:     "^TestBeyondLoopback$",
			Want:    "no token: 200",
		},
		{
			Name: "no-csrf", // the CSRF header not checked
			Pkg:  consolePkg, File: "cmd/ferry/internal/console/security.go",
			Find:    `if !equalSecret(r.Header.Get(HeaderCSRF), s.csrf) {`,
			Replace: `if false {`,
			Run:     "^TestWriteGuards$",
			Want:    "no CSRF header: 200",
		},
	})
}
