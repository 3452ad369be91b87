package doccheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/testenv"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file, info string
	line       int
	code       string
	output     []string // the ```text block right after it, if any
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", dir)
	}
	return dir
}

// markdownFiles returns README.md and every .md file under docs/.
func markdownFiles(t *testing.T, root string) []string {
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// parse returns the go blocks of a Markdown file, each with the text block
// that follows it.
func parse(file string, data []byte) []block {
	var out []block
	var cur *block
	var lines []string
	inFence, fenceInfo, start := false, "", 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	pendingGo := -1 // index in out of the last go block, awaiting its output
	for sc.Scan() {
		n++
		l := sc.Text()
		trim := strings.TrimSpace(l)
		if !inFence {
			if strings.HasPrefix(trim, "```") {
				inFence, fenceInfo, start, lines = true, strings.TrimSpace(strings.TrimPrefix(trim, "```")), n, nil
				continue
			}
			if trim != "" && !strings.HasPrefix(trim, "<!--") && !strings.HasSuffix(trim, ":") {
				pendingGo = -1 // prose between a program and a text block: not its output
			}
			continue
		}
		if strings.HasPrefix(trim, "```") {
			inFence = false
			text := strings.Join(lines, "\n")
			switch {
			case fenceInfo == "go" || strings.HasPrefix(fenceInfo, "go "):
				out = append(out, block{file: file, info: fenceInfo, line: start, code: text})
				pendingGo = len(out) - 1
			case fenceInfo == "text" && pendingGo >= 0:
				cur = &out[pendingGo]
				for _, o := range lines {
					if o = strings.TrimSpace(o); o != "" {
						cur.output = append(cur.output, o)
					}
				}
				pendingGo = -1
			default:
				pendingGo = -1
			}
			continue
		}
		lines = append(lines, l)
	}
	return out
}

func TestMarkdownGoBlocks(t *testing.T) {
	root := repoRoot(t)
	tests := testSources(t, root)
	var programs []block
	for _, f := range markdownFiles(t, root) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks := parse(f, data)
		// The page's own whole programs: a fragment may be a step of one.
		var own [][]string
		for _, b := range blocks {
			if isProgram(b) {
				own = append(own, trimmed(b.code))
			}
		}
		for _, b := range blocks {
			rel, _ := filepath.Rel(root, b.file)
			if isProgram(b) {
				programs = append(programs, b)
				continue
			}
			if !containsLines(slices.Concat(tests, own), b.code) {
				t.Errorf("%s:%d: this Go fragment appears in no _test.go file and in no whole program of its page, "+
					"so nothing compiles or runs it; make it a whole program, or copy it from an Example", rel, b.line)
			}
		}
	}
	if len(programs) == 0 {
		t.Fatal("no whole program in README.md or docs/: the README's handler example must be one")
	}
	for _, b := range programs {
		rel, _ := filepath.Rel(root, b.file)
		t.Run(fmt.Sprintf("%s:%d", rel, b.line), func(t *testing.T) {
			runProgram(t, root, b)
		})
	}
}

func isProgram(b block) bool { return strings.HasPrefix(strings.TrimSpace(b.code), "package main") }

// testSources returns every _test.go file of the repository, each as its
// lines trimmed of indentation.
func testSources(t *testing.T, root string) [][]string {
	var out [][]string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, trimmed(string(data)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsLines reports whether each paragraph of frag (its runs of lines
// between blank lines, comment lines left out) appears, its lines in a row,
// in one of files. An import line matches the package's line in any import
// block (`import _ "p"` matches `"p"`, `_ "p"` or `name "p"`).
func containsLines(files [][]string, frag string) bool {
	for _, para := range strings.Split(frag, "\n\n") {
		var want []func(string) bool
		for _, l := range trimmed(para) {
			if strings.HasPrefix(l, "//") {
				continue
			}
			if rest, ok := strings.CutPrefix(l, "import "); ok {
				path := rest[strings.Index(rest, `"`):]
				want = append(want, func(have string) bool { return have == path || strings.HasSuffix(have, " "+path) })
				continue
			}
			want = append(want, func(have string) bool { return have == l })
		}
		if len(want) > 0 && !paragraphIn(files, want) {
			return false
		}
	}
	return true
}

// paragraphIn reports whether want matches a run of lines of one of files.
// A paragraph of import lines alone matches them anywhere in one file.
func paragraphIn(files [][]string, want []func(string) bool) bool {
	for _, lines := range files {
	next:
		for i := 0; i+len(want) <= len(lines); i++ {
			for j, w := range want {
				if !w(lines[i+j]) {
					continue next
				}
			}
			return true
		}
	}
	return false
}

// runProgram builds b in a module of its own that requires this one and
// runs it as its fence says.
func runProgram(t *testing.T, root string, b block) {
	dir := t.TempDir()
	gomod := fmt.Sprintf("module docexample\n\ngo 1.26\n\nrequire github.com/ferrymq/ferry v0.0.0-00010101000000-000000000000\n\nreplace github.com/ferrymq/ferry => %s\n", root)
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.code+"\n"), 0o644))

	if slices.Contains(strings.Fields(b.info), "postgres") {
		transporttest.RequireBroker(t, "postgresql", testenv.PostgresURL())
	}
	bin := filepath.Join(dir, "prog")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the program does not build as copied:\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "FERRY_POSTGRES_URL="+testenv.PostgresURL())
	cmd.Dir = dir
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	serve := strings.Fields(b.info)[len(strings.Fields(b.info))-1] == "serve"
	if serve {
		deadline := time.Now().Add(30 * time.Second)
		for !hasLines(out.String(), b.output) {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the program did not print the documented output within 30s; it printed:\n%s", out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		must(t, cmd.Process.Signal(syscall.SIGINT))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program failed (%v); it printed:\n%s", err, out.String())
	}
	if !hasLines(out.String(), b.output) {
		t.Fatalf("the program's output lacks the documented lines %q; it printed:\n%s", b.output, out.String())
	}
}

// hasLines reports whether each of want appears within its own line of
// out, in any order: concurrent handlers print in the order they finish.
func hasLines(out string, want []string) bool {
	lines := strings.Split(out, "\n")
	used := make([]bool, len(lines))
next:
	for _, w := range want {
		for i, l := range lines {
			if !used[i] && strings.Contains(l, w) {
				used[i] = true
				continue next
			}
		}
		return false
	}
	return true
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
