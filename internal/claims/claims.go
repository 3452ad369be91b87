package claims

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A Statement is one block of a page that must carry a proof.
type Statement struct {
	Line int    // 1-based line of its first line
	Text string // its text, lines joined by spaces
}

var (
	listItem  = regexp.MustCompile(`^\s*([-*+]|\d+[.)])\s+`)
	tableSep  = regexp.MustCompile(`^\s*\|?\s*:?-{3,}`)
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	testName  = regexp.MustCompile(`^((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)((?:/[^\s/` + "`" + `]+)*)$`)
	designTag = regexp.MustCompile(`\(design[):]`)
)

// Statements returns the blocks of a Markdown page that must carry a proof.
func Statements(page []byte) []Statement {
	var (
		out     []Statement
		cur     []string
		curLine int
		inFence bool
		inTable bool
		inHTML  bool
		leadIn  = -1 // index in out of the last block if it ends with ':'
		inherit bool // the list or table under way follows a lead-in that proves it
	)
	flush := func() {
		if len(cur) > 0 {
			text := strings.Join(cur, " ")
			if inherit && listItem.MatchString(cur[0]) {
				text = "" // proven by its lead-in
			}
			out = append(out, Statement{Line: curLine, Text: text})
			leadIn = -1
			if strings.HasSuffix(text, ":") {
				leadIn = len(out) - 1
			}
			cur = nil
		}
	}
	// follows exempts a lead-in block that a list, table or code block
	// follows: its statements are in what follows.
	follows := func() {
		inherit = false
		if leadIn >= 0 && leadIn == len(out)-1 {
			if lead := out[leadIn].Text; len(Refs(lead)) > 0 || Marked(lead) {
				inherit = true // it proves what follows, and stays
			} else {
				out[leadIn].Text = ""
			}
		}
		leadIn = -1
	}
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		t := strings.TrimSpace(l)
		switch {
		case inFence:
			if strings.HasPrefix(t, "```") {
				inFence = false
			}
			continue
		case inHTML:
			if strings.Contains(t, "-->") {
				inHTML = false
			}
			continue
		case strings.HasPrefix(t, "```"):
			flush()
			follows()
			inFence = true
			continue
		case strings.HasPrefix(t, "<!--"):
			flush()
			inHTML = !strings.Contains(t, "-->")
			continue
		case t == "":
			flush()
			inTable = false
			continue
		case len(cur) == 0 && (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")):
			// An indented code block.
			follows()
			continue
		case strings.HasPrefix(t, "#"):
			flush()
			leadIn, inherit = -1, false
			continue
		case strings.HasPrefix(t, "|"):
			if !inTable {
				// The header row; the separator follows.
				flush()
				follows()
				inTable = true
				continue
			}
			if tableSep.MatchString(t) {
				continue
			}
			if inherit {
				t = "" // proven by its lead-in
			}
			out = append(out, Statement{Line: n, Text: t})
			continue
		case listItem.MatchString(l) && !continues(cur, l):
			wasItem := len(cur) > 0 && listItem.MatchString(cur[0])
			flush()
			if !wasItem {
				follows()
			}
			curLine = n
			cur = append(cur, strings.TrimSpace(l))
			continue
		}
		if len(cur) == 0 {
			curLine = n
			inherit = false // a paragraph ends the list
		}
		cur = append(cur, strings.TrimPrefix(t, "> "))
	}
	flush()
	kept := out[:0]
	for _, s := range out {
		if s.Text != "" {
			kept = append(kept, s)
		}
	}
	return kept
}

// continues reports whether line l, which looks like a numbered list
// item, continues the paragraph cur instead ("… default\n1024) unless"):
// as in Markdown, only "1." or "1)" starts a list inside a paragraph.
func continues(cur []string, l string) bool {
	if len(cur) == 0 || listItem.MatchString(cur[0]) {
		return false
	}
	t := strings.TrimSpace(l)
	return t[0] >= '0' && t[0] <= '9' && !strings.HasPrefix(t, "1.") && !strings.HasPrefix(t, "1)")
}

// Refs returns the tests named in text: the code spans that name a test,
// example, benchmark or fuzz target, with their subtest paths.
func Refs(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		if testName.MatchString(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// brokerDoc matches "broker documentation", or a broker's or client's
// name before "documentation" ("Redis documentation", "sarama's
// documentation").
var brokerDoc = regexp.MustCompile(`(?i)\b(broker|redis|kafka|rabbitmq|mosquitto|mqtt|aws|sqs|sns|sarama|amqp091-go|rabbitmq-c|go-redis|paho|nats)('s)? documentation\b`)

// Marked reports whether text says it is the broker's documentation or a
// design choice.
func Marked(text string) bool {
	return brokerDoc.MatchString(text) || designTag.MatchString(text)
}

// An Index knows the module's test functions and string literals.
type Index struct {
	funcs    map[string]bool
	literals map[string]bool
}

var (
	testFunc  = regexp.MustCompile(`(?m)^func ((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	goLiteral = regexp.MustCompile("\"((?:[^\"\\\\\\n]|\\\\.)*)\"|`([^`]*)`")
)

// Load indexes the Go sources of the module rooted at root: the test
// functions of its _test.go files and the string literals of all its Go
// files. It skips node_modules and hidden folders.
func Load(root string) (*Index, error) {
	ix := &Index{funcs: make(map[string]bool), literals: make(map[string]bool)}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, "_test.go") {
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				ix.funcs[string(m[1])] = true
			}
		}
		for _, m := range goLiteral.FindAllSubmatch(b, -1) {
			s := string(m[1]) + string(m[2])
			if s != "" && len(s) < 200 {
				ix.literals[s] = true
			}
		}
		return nil
	})
	return ix, err
}

// Check returns why ref names no test of the module, or nil: the function
// must exist, and its subtest path must be made of string literals, one or
// more segments each (go test writes a subtest's spaces as underscores).
func (ix *Index) Check(ref string) error {
	m := testName.FindStringSubmatch(ref)
	if m == nil {
		return fmt.Errorf("%q is not a test name", ref)
	}
	if !ix.funcs[m[1]] {
		return fmt.Errorf("no _test.go file defines %s", m[1])
	}
	if m[2] == "" {
		return nil
	}
	segs := strings.Split(m[2][1:], "/")
	for i := 0; i < len(segs); {
		j := len(segs)
		for ; j > i; j-- {
			name := strings.Join(segs[i:j], "/")
			if ix.literals[name] || ix.literals[strings.ReplaceAll(name, "_", " ")] {
				break
			}
		}
		if j == i {
			return fmt.Errorf("subtest %q of %s: no string literal in the module names it", strings.Join(segs[i:], "/"), m[1])
		}
		i = j
	}
	return nil
}

// A Problem is a statement without proof, or a reference to no test.
type Problem struct {
	Line int
	Msg  string
}

// CheckPage returns the problems of a page.
func (ix *Index) CheckPage(page []byte) []Problem {
	var out []Problem
	for _, s := range Statements(page) {
		refs := Refs(s.Text)
		if len(refs) == 0 && !Marked(s.Text) {
			text := s.Text
			if len(text) > 100 {
				text = text[:100] + "…"
			}
			out = append(out, Problem{s.Line, "names no test, and is not marked broker documentation or (design): " + text})
		}
		for _, r := range refs {
			if err := ix.Check(r); err != nil {
				out = append(out, Problem{s.Line, err.Error()})
			}
		}
	}
	return out
}
