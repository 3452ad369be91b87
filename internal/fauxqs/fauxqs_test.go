package fauxqs

import (
	"context"
	"errors"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	if !Installed() {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("fauxqs not installed: run npm ci in %s", Dir())
		}
		t.Skipf("fauxqs not installed: run npm ci in %s", Dir())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx)
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
