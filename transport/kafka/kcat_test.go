package kafka_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// startKfakeServer builds internal/kfakeserver and runs it as a separate
// process with 6 partitions per topic, returning its address. The server
// exits when the test ends (its stdin closes) or is killed by Cleanup.
func startKfakeServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kfakeserver")
	build := exec.Command("go", "build", "-o", bin, "github.com/ferrymq/ferry/internal/kfakeserver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kfakeserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-partitions", "6", "-stdin")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("kfakeserver did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "ready ")), ",")[0]
}

func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("kcat %v: %v\n%s", args, err, stderr)
	}
	return string(out)
}

// TestKcatInterop: records produced by kcat (librdkafka) are handled with
// the right key, ID and headers; ours are readable by kcat; and with
// -X topic.partitioner=murmur2_random kcat puts each key on the partition
// we do.
func TestKcatInterop(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv(transporttest.RequireBrokersEnv) == "1" {
			t.Fatalf("kcat not installed (%s=1)", transporttest.RequireBrokersEnv)
		}
		t.Skipf("kcat not installed (apt-get install kcat); set %s=1 to fail instead", transporttest.RequireBrokersEnv)
	}
	addr := startKfakeServer(t)
	tr := open(t, []string{addr})
	const n = 20
	key := func(i int) string { return "customer-" + strconv.Itoa(i*31) }

	// kcat -> Ferry.
	for i := range n {
		kcat(t, key(i)+"|payload-"+strconv.Itoa(i)+"\n", "-b", addr, "-P", "-t", "from-kcat", "-K", "|",
			"-X", "topic.partitioner=murmur2_random", "-H", "ferry-id=id-"+strconv.Itoa(i), "-H", "source=kcat")
	}
	st := subscribe(t, tr, transport.Subscription{Topic: "from-kcat", Group: "g", StartAtOldest: true})
	kcatPartition := map[string]int32{}
	for _, m := range receive(t, st, n) {
		i, _ := strconv.Atoi(strings.TrimPrefix(m.ID, "id-"))
		if m.Key != key(i) || string(m.Payload) != "payload-"+strconv.Itoa(i) || len(m.Headers) != 1 || m.Headers["source"] != "kcat" {
			t.Errorf("from kcat: ID %q key %q payload %q headers %v", m.ID, m.Key, m.Payload, m.Headers)
		}
		kcatPartition[m.Key] = m.Facts().Partition
	}

	// Ferry -> kcat, same keys: same partitions.
	var msgs []*handler.Message
	for i := range n {
		msgs = append(msgs, &handler.Message{ID: "f-" + strconv.Itoa(i), Key: key(i), Topic: "from-ferry",
			Payload: []byte("ferry-" + strconv.Itoa(i)), Headers: map[string]string{"source": "ferry"}})
	}
	publishAll(t, tr, msgs)
	out := kcat(t, "", "-b", addr, "-C", "-t", "from-ferry", "-o", "beginning", "-e", "-q", "-f", "%p\t%k\t%s\t%h\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		t.Fatalf("kcat read %d records, want %d:\n%s", len(lines), n, out)
	}
	distinct := map[int32]bool{}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("kcat line %q", l)
		}
		p, _ := strconv.Atoi(f[0])
		i, _ := strconv.Atoi(strings.TrimPrefix(f[2], "ferry-"))
		hs := map[string]string{}
		for _, kv := range strings.Split(f[3], ",") {
			k, v, _ := strings.Cut(kv, "=")
			hs[k] = v
		}
		if f[1] != key(i) || hs["ferry-id"] != "f-"+strconv.Itoa(i) || hs["source"] != "ferry" {
			t.Errorf("kcat read key %q value %q headers %v", f[1], f[2], hs)
		}
		if want, ok := kcatPartition[f[1]]; !ok || int32(p) != want {
			t.Errorf("key %s: ours on partition %d, kcat's murmur2_random on %d", f[1], p, want)
		}
		distinct[int32(p)] = true
	}
	if len(distinct) < 3 {
		t.Errorf("%d keys landed on only %d partitions: the check proves little", n, len(distinct))
	}
}
