package mutation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// childTimeout bounds one child's tests.
const childTimeout = "90s"

// buildTimeout bounds one child's build.
const buildTimeout = 5 * time.Minute

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
//
// Each subtest, before it pauses for t.Parallel, hands its build and run to
// the kit, which works through them in the background (see [kit]); after
// the pause it waits for its outcome and judges it. So -run picks the
// mutants, and the kit, not the -parallel limit, bounds the children.
func TestMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("mutation runs build and run other packages' tests; skipped with -short")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	k := newKit(goCmd, moduleRoot(t), t.TempDir())
	t.Cleanup(k.wait) // before the binaries' directory is removed
	start := time.Now()
	t.Cleanup(func() { t.Logf("kit wall time %s", time.Since(start).Round(100*time.Millisecond)) })

	// The controls first, so that their jobs queue first: "control/<pkg>/<run>"
	// is matched by -run as three levels, as a nested subtest would be.
	type control struct{ pkg, run string }
	var controls []control
	names := selectedGroups(t)
	for _, g := range names {
		for _, m := range groups[g] {
			c := control{m.Pkg, m.Run}
			if slices.Contains(controls, c) {
				continue
			}
			controls = append(controls, c)
			t.Run("control/"+m.Pkg+"/"+m.Run, func(t *testing.T) {
				if m.Requires != nil {
					m.Requires(t)
				}
				res := k.start(func() outcome { return k.control(m.Pkg, m.Run) })
				t.Parallel()
				o := <-res
				t.Log(o)
				switch {
				case o.buildErr != nil:
					t.Fatalf("the unmutated package does not build: %v\n%s", o.buildErr, o.out)
				case o.runErr != nil:
					t.Fatalf("the unmutated test fails; fix it before its mutants mean anything:\n%s", o.out)
				case strings.Contains(o.out, "no tests to run"):
					t.Fatalf("-run=%s matches no test in %s:\n%s", m.Run, m.Pkg, o.out)
				}
			})
		}
	}
	for _, g := range names {
		seen := map[string]bool{}
		for _, m := range groups[g] {
			if seen[m.Name] {
				t.Fatalf("mutant %s/%s listed twice", g, m.Name)
			}
			seen[m.Name] = true
			t.Run(g+"/"+m.Name, func(t *testing.T) {
				overlay := writeOverlay(t, k.root, m)
				if m.Requires != nil {
					m.Requires(t)
				}
				res := k.start(func() outcome { return k.mutant(m.Pkg, overlay, m.Run) })
				t.Parallel()
				o := <-res
				t.Log(o)
				var exit *exec.ExitError
				switch {
				case o.buildErr != nil:
					t.Fatalf("the mutant does not compile; fix its Replace: %v\n%s", o.buildErr, o.out)
				case o.runErr == nil:
					t.Fatalf("%s passed with the bug; want it to fail with %q:\n%s", m.Run, m.Want, o.out)
				case !errors.As(o.runErr, &exit):
					t.Fatalf("running the test binary: %v", o.runErr)
				case !strings.Contains(o.out, "--- FAIL") || !strings.Contains(o.out, m.Want):
					t.Fatalf("%s failed, but not with %q:\n%s", m.Run, m.Want, o.out)
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

// A kit builds and runs the children in the background. A child is two
// steps: `go test -c` builds the package's test binary (with the mutant's
// overlay, or without for the control), and the binary then runs the named
// test in the package's directory, as go test would run it. Builds take the
// CPU and runs mostly wait on timers and brokers, so each step has its own
// bound, GOMAXPROCS: a run never holds up a build. A package's control
// binary is built once and serves every control of that package.
type kit struct {
	goCmd, root, dir string

	builds, runs chan struct{} // the bounds
	wg           sync.WaitGroup
	n            atomic.Int64 // names the binaries

	mu       sync.Mutex
	controls map[string]func() built // package → its unmutated test binary, built once
}

// A built is the outcome of one `go test -c`.
type built struct {
	bin  string
	out  string // go's output, when the build failed
	err  error
	took time.Duration // wall time
	cpu  time.Duration // user and system time of go and the compilers and linker it ran
}

// An outcome is what one child did.
type outcome struct {
	out        string // the run's output, or the build's when it failed
	buildErr   error
	runErr     error
	build, run time.Duration // wall times
	buildCPU   time.Duration
}

func (o outcome) String() string {
	return fmt.Sprintf("built in %s (%s of CPU), ran in %s", o.build, o.buildCPU, o.run)
}

// cpuTime is the user and system time of cmd's process and the children
// it waited for.
func cpuTime(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Round(100 * time.Millisecond)
}

func newKit(goCmd, root, dir string) *kit {
	n := runtime.GOMAXPROCS(0)
	return &kit{goCmd: goCmd, root: root, dir: dir,
		builds: make(chan struct{}, n), runs: make(chan struct{}, n),
		controls: map[string]func() built{}}
}

// start runs job in the background and returns where its outcome arrives.
func (k *kit) start(job func() outcome) <-chan outcome {
	res := make(chan outcome, 1)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		res <- job()
	}()
	return res
}

// wait waits for every job started.
func (k *kit) wait() { k.wg.Wait() }

// control runs the tests matching run in pkg's unmutated test binary.
func (k *kit) control(pkg, run string) outcome {
	k.mu.Lock()
	b, ok := k.controls[pkg]
	if !ok {
		b = sync.OnceValue(func() built { return k.build(pkg, "") })
		k.controls[pkg] = b
	}
	k.mu.Unlock()
	return k.runBuilt(b(), pkg, run)
}

// mutant builds pkg's test binary with the overlay and runs the tests
// matching run in it.
func (k *kit) mutant(pkg, overlay, run string) outcome {
	return k.runBuilt(k.build(pkg, overlay), pkg, run)
}

func (k *kit) runBuilt(b built, pkg, run string) outcome {
	if b.err != nil {
		return outcome{out: b.out, buildErr: b.err, build: b.took, buildCPU: b.cpu}
	}
	out, took, err := k.run(b.bin, pkg, run)
	return outcome{out: out, runErr: err, build: b.took, buildCPU: b.cpu, run: took}
}

// build runs `go test -c` for pkg, with the overlay file if given.
func (k *kit) build(pkg, overlay string) built {
	k.builds <- struct{}{}
	defer func() { <-k.builds }()
	start := time.Now()
	bin := filepath.Join(k.dir, fmt.Sprintf("%d.test", k.n.Add(1)))
	// No vet and no symbol tables: the children only run tests, and both
	// cost seconds per mutated package on two cores.
	args := []string{"test", "-c", "-o", bin, "-vet=off", "-ldflags=-s -w"}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.goCmd, append(args, pkg)...)
	cmd.Dir = k.root
	out, err := cmd.CombinedOutput()
	b := built{bin: bin, took: time.Since(start).Round(100 * time.Millisecond), cpu: cpuTime(cmd)}
	if err != nil {
		b.out, b.err = string(out), err
	}
	return b
}

// run runs the tests matching pattern in the test binary bin, in pkg's
// directory, and returns the combined output.
func (k *kit) run(bin, pkg, pattern string) (string, time.Duration, error) {
	k.runs <- struct{}{}
	defer func() { <-k.runs }()
	start := time.Now()
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.timeout="+childTimeout)
	cmd.Dir = filepath.Join(k.root, pkg)
	cmd.Env = append(os.Environ(), transporttest.RequireBrokersEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(start).Round(100 * time.Millisecond), err
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
