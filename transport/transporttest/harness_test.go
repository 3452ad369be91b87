package transporttest_test

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

var safeName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

func TestUniqueName(t *testing.T) {
	seen := make(map[string]bool)
	for _, prefix := range []string{"orders", "", "9lives", "AMQ.gen", "Ünïcødé topic/with spaces", strings.Repeat("p", 100)} {
		for range 3 {
			n := transporttest.UniqueName(t, prefix)
			if !safeName.MatchString(n) || len(n) > 60 {
				t.Errorf("UniqueName(%q) = %q: want [a-z][a-z0-9-]*, at most 60 characters", prefix, n)
			}
			if strings.HasPrefix(n, "amq.") {
				t.Errorf("UniqueName(%q) = %q starts with the reserved AMQP prefix", prefix, n)
			}
			if seen[n] {
				t.Errorf("UniqueName(%q) = %q twice", prefix, n)
			}
			seen[n] = true
		}
	}
	t.Run("A_Long/Nested Sub-test_Name_With_CAPS_and_more_words_than_fit", func(t *testing.T) {
		n := transporttest.UniqueName(t, "topic")
		if !safeName.MatchString(n) || len(n) > 60 || !strings.Contains(n, "than-fit") || !strings.HasPrefix(n, "topic-") {
			t.Errorf("UniqueName = %q: want the prefix and the end of the test name, sanitised", n)
		}
	})
}

// recordingTB records Skipf and Fatalf instead of stopping the test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                        {}
func (r *recordingTB) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recordingTB) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestRequireBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := l.Addr().String()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close()
	defer l.Close()

	for _, c := range []struct {
		name, addr, env string
		skip, fail      bool
	}{
		{"up", up, "", false, false},
		{"up as URL", "redis://user:secret@" + up + "/0", "", false, false},
		{"down", downAddr, "", true, false},
		{"down, required", downAddr, "1", false, true},
		{"down as URL", "amqp://guest:secret@" + downAddr + "/", "", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(transporttest.RequireBrokersEnv, c.env)
			r := &recordingTB{TB: t}
			transporttest.RequireBroker(r, "broker", c.addr)
			if (r.skipped != "") != c.skip || (r.failed != "") != c.fail {
				t.Fatalf("RequireBroker(%q) with %s=%q: skipped %q, failed %q", c.addr, transporttest.RequireBrokersEnv, c.env, r.skipped, r.failed)
			}
			if msg := r.skipped + r.failed; strings.Contains(msg, "secret") {
				t.Errorf("message shows the password: %s", msg)
			}
			if r.skipped != "" && !strings.Contains(r.skipped, "FERRY_REQUIRE_BROKERS=1") {
				t.Errorf("skip message does not say how to fail instead: %s", r.skipped)
			}
		})
	}
}
