package fauxqs

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout+time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvRequire) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	pid := s.cmd.Process.Pid
	s.Stop()
	s.Stop() // idempotent
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d still there after Stop: %v", pid, err)
	}
	if _, err := http.Get(s.URL + "/health"); err == nil {
		t.Fatal("server still answering after Stop")
	}
}

// TestInstallWithoutNPM: with no npm on PATH and nothing installed, Install
// says what to install, and wraps ErrUnavailable (ForTest then skips).
func TestInstallWithoutNPM(t *testing.T) {
	src := t.TempDir()
	for _, f := range pinned {
		b, err := os.ReadFile(filepath.Join(Dir(), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvCache, t.TempDir())
	_, err := installFrom(context.Background(), src)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("installFrom without npm = %v; want ErrUnavailable", err)
	}
	for _, want := range []string{"npm is not on PATH", "apt-get install nodejs npm", "npm ci", EnvURL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestLockExcludes: a second holder of the install lock waits until the
// first lets go, so two test binaries never install at once.
func TestLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held = %v; want it to wait until ctx ends", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := lock(context.Background(), path)
		if err == nil {
			u()
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("second lock returned (%v) while the first was held", err)
	default:
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second lock not granted after the first was released")
	}
}
