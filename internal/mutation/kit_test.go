package mutation

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// A Mutant is one injected bug and the test that must catch it.
type Mutant struct {
	Name string // the bug, short and unique in its group: "dedupe-early-mark"

	Pkg     string // the package whose tests run, from the module root: "./middleware"
	File    string // the file to mutate, from the module root: "middleware/dedupe.go"
	Find    string // an exact snippet that occurs in File exactly once
	Replace string // what it becomes
	More    []Edit // further edits the mutant needs, if any

	Run  string // the -run pattern of the test(s) that must fail
	Want string // text the failing output must contain

	// Requires, if set, skips (or, with FERRY_REQUIRE_BROKERS=1, fails)
	// the mutant when a service its test needs is unreachable.
	Requires func(tb testing.TB)
}

// An Edit is one snippet replaced in one file.
type Edit struct {
	File, Find, Replace string
}

func (m Mutant) edits() []Edit {
	return append([]Edit{{m.File, m.Find, m.Replace}}, m.More...)
}

// groups holds the registered mutants: group name → mutants.
var groups = map[string][]Mutant{}

// register adds a group of mutants; it panics on a duplicate group.
func register(group string, ms []Mutant) {
	if _, dup := groups[group]; dup {
		panic("mutation: group " + group + " registered twice")
	}
	groups[group] = ms
}

// parallel bounds the child processes running at once.
const parallel = 2

// childTimeout bounds one child's tests.
const childTimeout = "90s"

// defaultGroups are the groups a plain `go test ./...` runs: the core's
// kit, which must fit CI's two minutes (issue 28). The transports' groups,
// each needing its broker and minutes of builds, run on demand with
// FERRY_MUTANTS (see the package doc).
var defaultGroups = []string{"core"}

// selectedGroups returns the groups to run, sorted: FERRY_MUTANTS=all for
// every group, a comma-separated list of groups for those, the default
// groups when it is unset. An unknown group name fails t.
func selectedGroups(t *testing.T) []string {
	env := strings.TrimSpace(os.Getenv("FERRY_MUTANTS"))
	var want []string
	switch env {
	case "":
		want = defaultGroups
	case "all":
		for g := range groups {
			want = append(want, g)
		}
	default:
		want = strings.Split(env, ",")
	}
	var names []string
	for _, g := range want {
		g = strings.TrimSpace(g)
		if _, ok := groups[g]; !ok {
			known := slices.Sorted(func(yield func(string) bool) {
				for k := range groups {
					if !yield(k) {
						return
					}
				}
			})
			t.Fatalf("FERRY_MUTANTS: no group %q (groups: %s, or all)", g, strings.Join(known, ", "))
		}
		if !slices.Contains(names, g) {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	return names
}

// TestMutants runs every mutant's test against the mutated source and
// requires it to fail with the mutant's text, and every test unmutated (the
// controls) to pass.
func TestMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("mutation runs build and run other packages' tests; skipped with -short")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	root := moduleRoot(t)
	sem := make(chan struct{}, parallel)
	start := time.Now()
	t.Cleanup(func() { t.Logf("kit wall time %s", time.Since(start).Round(100*time.Millisecond)) })

	type control struct{ pkg, run string }
	var controls []control
	names := selectedGroups(t)
	t.Run("control", func(t *testing.T) {
		for _, g := range names {
			for _, m := range groups[g] {
				if c := (control{m.Pkg, m.Run}); !slices.Contains(controls, c) {
					controls = append(controls, c)
					t.Run(m.Pkg+"/"+m.Run, func(t *testing.T) {
						t.Parallel()
						if m.Requires != nil {
							m.Requires(t)
						}
						sem <- struct{}{}
						out, err := goTest(goCmd, root, "", m.Pkg, m.Run)
						<-sem
						if err != nil {
							t.Fatalf("the unmutated test fails; fix it before its mutants mean anything:\n%s", out)
						}
						if strings.Contains(out, "no tests to run") {
							t.Fatalf("-run=%s matches no test in %s:\n%s", m.Run, m.Pkg, out)
						}
					})
				}
			}
		}
	})
	for _, g := range names {
		seen := map[string]bool{}
		for _, m := range groups[g] {
			if seen[m.Name] {
				t.Fatalf("mutant %s/%s listed twice", g, m.Name)
			}
			seen[m.Name] = true
			t.Run(g+"/"+m.Name, func(t *testing.T) {
				t.Parallel()
				overlay := writeOverlay(t, root, m)
				if m.Requires != nil {
					m.Requires(t)
				}
				sem <- struct{}{}
				out, err := goTest(goCmd, root, overlay, m.Pkg, m.Run)
				<-sem
				var exit *exec.ExitError
				switch {
				case err == nil:
					t.Fatalf("%s passed with the bug; want it to fail with %q:\n%s", m.Run, m.Want, out)
				case !errors.As(err, &exit):
					t.Fatalf("running go test: %v", err)
				case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
					t.Fatalf("the mutant does not compile; fix its Replace:\n%s", out)
				case !strings.Contains(out, "--- FAIL") || !strings.Contains(out, m.Want):
					t.Fatalf("%s failed, but not with %q:\n%s", m.Run, m.Want, out)
				}
			})
		}
	}
}

// writeOverlay applies m's edits to copies of their files in a temporary
// directory and returns the path of the overlay file naming them. It fails
// t if a snippet does not occur exactly once.
func writeOverlay(t *testing.T, root string, m Mutant) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{} // file → mutated text
	var order []string
	for _, e := range m.edits() {
		src, ok := files[e.File]
		if !ok {
			b, err := os.ReadFile(filepath.Join(root, e.File))
			if err != nil {
				t.Fatalf("mutant %s: %v", m.Name, err)
			}
			src = string(b)
			order = append(order, e.File)
		}
		if e.Find == "" || e.Find == e.Replace {
			t.Fatalf("mutant %s: an edit of %s changes nothing", m.Name, e.File)
		}
		if n := strings.Count(src, e.Find); n != 1 {
			t.Fatalf("mutant %s: its snippet occurs %d times in %s, want exactly once; the code changed: update the mutant's Find to the new code, keeping the same bug.\nsnippet:\n%s",
				m.Name, n, e.File, e.Find)
		}
		files[e.File] = strings.Replace(src, e.Find, e.Replace, 1)
	}
	replace := map[string]string{}
	for i, f := range order {
		p := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(f)))
		if err := os.WriteFile(p, []byte(files[f]), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(root, f)] = p
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// goTest runs the tests matching run in pkg, with the overlay file if
// given, and returns the combined output.
func goTest(goCmd, root, overlay, pkg, run string) (string, error) {
	// No vet and no symbol tables: the children only run tests, and both
	// cost seconds per mutated package on two cores.
	args := []string{"test", "-count=1", "-vet=off", "-ldflags=-s -w", "-timeout=" + childTimeout, "-run=" + run}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	cmd := exec.Command(goCmd, append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), transporttest.RequireBrokersEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var rootOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
})

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := rootOnce()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
