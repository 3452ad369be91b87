package fauxqs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Region is the region the emulator and the test clients use.
const Region = "us-east-1"

// EnvURL names the environment variable that points tests at an emulator
// already running (for example http://127.0.0.1:4566) instead of starting one.
const EnvURL = "FERRY_FAUXQS_URL"

// EnvRequire names the environment variable that turns skips into failures.
const EnvRequire = "FERRY_REQUIRE_BROKERS"

// Server is a running fauxqs.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:PORT.
	URL string

	cmd  *exec.Cmd
	done chan struct{}
}

// Dir returns the folder holding package.json and server.mjs.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Installed reports whether `npm ci` has been run in [Dir].
func Installed() bool { return installedIn(Dir()) }

// Start starts a fauxqs on a free loopback port and waits until /health
// answers or ctx ends, installing it first if need be ([Install]). Stop it
// with [Server.Stop].
func Start(ctx context.Context) (*Server, error) {
	dir, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(nodeIn(dir), filepath.Join(dir, "server.mjs"), strconv.Itoa(port))
	cmd.Dir = dir
	// Die with the test binary even if it is killed before Stop runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fauxqs: start node: %w", err)
	}
	s := &Server{URL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	var errText strings.Builder
	var errMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errMu.Lock()
			if errText.Len() < 4096 {
				errText.WriteString(sc.Text() + "\n")
			}
			errMu.Unlock()
		}
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop()
		errMu.Lock()
		defer errMu.Unlock()
		return nil, fmt.Errorf("fauxqs: %w; stderr: %s", err, errText.String())
	}
	return s, nil
}

func (s *Server) waitHealthy(ctx context.Context) error {
	c := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return errors.New("exited before it was healthy")
		case <-ctx.Done():
			return fmt.Errorf("not healthy: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SQS makes one SQS API call against s with the AWS SDK for JavaScript v3
// (@aws-sdk/client-sqs, pinned beside fauxqs and installed with it), run
// by the emulator's own Node: a client independent of aws-sdk-go-v2 for
// interop tests, which needs nothing that the emulator does not. action
// is the API action ("SendMessage", "ReceiveMessage"), input its input
// (marshalled to JSON, with the SDK's field names), and the call's JSON
// output is decoded into out (nil to drop it). ctx bounds the call.
func (s *Server) SQS(ctx context.Context, action string, input, out any) error {
	dir, err := Install(ctx)
	if err != nil {
		return err
	}
	in, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("fauxqs: %s input: %w", action, err)
	}
	cmd := exec.CommandContext(ctx, nodeIn(dir), filepath.Join(dir, "sqsclient.mjs"), s.URL, Region, action, string(in))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("fauxqs: @aws-sdk/client-sqs %s: %w: %s", action, err, strings.TrimSpace(stderr.String()))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("fauxqs: @aws-sdk/client-sqs %s output %q: %w", action, b, err)
	}
	return nil
}

// Stop ends the server by PID (SIGTERM, then SIGKILL after 5 s) and waits for
// it to exit. It is safe to call more than once, and on a server not started
// by [Start] it does nothing.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Config returns an aws.Config for the server: region [Region], static dummy
// credentials, and BaseEndpoint set to the server's URL.
func (s *Server) Config() aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(s.URL),
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("fauxqs: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// ForTest returns the test process's emulator: the one at $FERRY_FAUXQS_URL
// if set, else one started on first use (stopped by [Main]). If none can be
// had, it skips tb, or fails it when FERRY_REQUIRE_BROKERS=1.
func ForTest(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			shared.srv = &Server{URL: strings.TrimRight(u, "/")}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shared.err = shared.srv.waitHealthy(ctx)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), installTimeout+time.Minute)
		defer cancel()
		shared.srv, shared.err = Start(ctx)
	})
	if shared.err != nil {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("fauxqs unavailable (%s=1): %v", EnvRequire, shared.err)
		}
		tb.Skipf("skipped: the SQS/SNS emulator is unavailable (set %s=1 to fail instead): %v", EnvRequire, shared.err)
	}
	return shared.srv
}

// Main runs the tests and then stops the emulator [ForTest] started, if any.
// Use it from TestMain: func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil && shared.srv.cmd != nil {
		shared.srv.Stop()
	}
	return code
}
