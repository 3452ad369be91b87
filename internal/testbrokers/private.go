package testbrokers

import (
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// program returns the path of the first of paths that is installed, or
// skips tb (fails it with FERRY_REQUIRE_BROKERS=1), saying how to install
// name.
func program(tb testing.TB, name, install string, paths ...string) string {
	tb.Helper()
	for _, p := range paths {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
		tb.Fatalf("%s not installed (%s); %s=1", name, install, transporttest.RequireBrokersEnv)
	}
	tb.Skipf("%s not installed (%s); set %s=1 to fail instead", name, install, transporttest.RequireBrokersEnv)
	return ""
}
