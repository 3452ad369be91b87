package credleak_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/jetstream"
	"github.com/ferrymq/ferry/transport/kafka"
	"github.com/ferrymq/ferry/transport/memory"
	"github.com/ferrymq/ferry/transport/mqtt"
	"github.com/ferrymq/ferry/transport/rabbitmq"
	"github.com/ferrymq/ferry/transport/redisstream"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
	"github.com/ferrymq/ferry/transport/transporttest"
)

// The secrets, one per part of a URL: none may appear in an error or a
// log line.
const (
	user  = "credleakUserQ7x"
	pass  = "credleakPassZ9y"
	token = "credleakTokenK3w"
	inner = "credleakInnerP5v" // the password of an endpoint's own user-info
	value = "credleakValueM2u" // a malformed value of a known key
)

var secrets = []string{user, pass, token, inner, value}

// A capture collects what a case logs, through the transport's logger and
// slog.Default.
type capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// A leakCase runs one transport's failure paths and returns the errors
// they gave. lg is the logger to inject.
type leakCase struct {
	name string
	run  func(t *testing.T, ctx context.Context, lg *slog.Logger) []error
}

// check fails t for every secret in an error or the log, and for a case
// whose failure paths did not fail (it would prove nothing).
func check(t testing.TB, name string, errs []error, logs string) {
	t.Helper()
	failed := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		failed++
		t.Logf("%s: %v", name, err)
		text := fmt.Sprintf("%v | %+v | %#v", err, err, err)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s: an error shows a secret (%s): %v", name, s, err)
			}
		}
	}
	if failed == 0 {
		t.Errorf("%s: no failure path failed, so nothing was checked", name)
	}
	for _, s := range secrets {
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, s) {
				t.Errorf("%s: a log line shows a secret (%s): %s", name, s, l)
			}
		}
	}
}

// requireAuth fails t unless err, a broker's refusal of wrong
// credentials, wraps transport.ErrAuth: the one check a program needs,
// whatever the transport.
func requireAuth(t *testing.T, name string, err error) {
	t.Helper()
	if !errors.Is(err, transport.ErrAuth) {
		t.Errorf("%s: wrong credentials gave %v, want an error wrapping transport.ErrAuth", name, err)
	}
}

// refused returns an address on which nothing listens.
func refused(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// closedPublish closes tr and returns what Publish says then.
func closedPublish(ctx context.Context, tr transport.Transport, topic string) []error {
	err := tr.Close(ctx)
	perr := tr.Publish(ctx, &handler.Message{ID: "id-1", Topic: topic, Payload: []byte("x")})
	if !errors.Is(perr, transport.ErrClosed) {
		perr = fmt.Errorf("want ErrClosed, got %w", perr)
	}
	return []error{err, perr}
}

// subscribeBad subscribes with an unknown option whose value is a secret.
func subscribeBad(ctx context.Context, tr transport.Subscriber, topic string) error {
	st, err := tr.Subscribe(ctx, transport.Subscription{Topic: topic, Group: "g", Options: map[string]string{"token": token}})
	if err == nil {
		_ = st.Close(ctx)
		return errors.New("Subscribe with an unknown option succeeded")
	}
	return err
}

func newCases() []leakCase {
	return []leakCase{
		{"memory", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			_, e1 := transport.Open(ctx, "memory://"+user+":"+pass+"@x?token="+token)
			_, e2 := memory.New(ctx, "memory://?partitions="+value)
			tr, err := memory.New(ctx, "memory://")
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, subscribeBad(ctx, tr, "t")}, closedPublish(ctx, tr, "t")...)
		}},
		{"kafka", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.EnableSASL(),
				kfake.Superuser("PLAIN", user, pass), kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			addr := c.ListenAddrs()[0]
			fast := []kafka.Option{kafka.WithLogger(lg), kafka.SessionTimeout(time.Second), kafka.Heartbeat(100 * time.Millisecond)}
			_, e1 := kafka.New(ctx, "kafka://"+user+":"+pass+"@"+addr+"?sasl=plain&token="+token, fast...)
			_, e2 := kafka.New(ctx, "kafka://"+user+":"+pass+"@"+addr+"?sasl=plain&session_timeout="+value, fast...)
			_, e3 := kafka.New(ctx, "kafka://"+user+":"+inner+"@"+addr+"?sasl=plain&allow_plaintext_auth=true", fast...) // wrong password
			requireAuth(t, "kafka", e3)
			_, e4 := kafka.New(ctx, "kafka://"+user+":"+pass+"@"+refused(t)+"?sasl=plain&allow_plaintext_auth=true", fast...)
			_, e5 := transport.Open(ctx, "kafka://"+user+":"+pass+"@"+addr+"?sasl=scram-sha-256&token="+token)
			tr, err := kafka.New(ctx, "kafka://"+user+":"+pass+"@"+addr+"?sasl=plain&allow_plaintext_auth=true", fast...)
			if err != nil {
				t.Fatalf("kafka.New with the right credentials: %v", err)
			}
			return append([]error{e1, e2, e3, e4, e5, subscribeBad(ctx, tr, "t")}, closedPublish(ctx, tr, "t")...)
		}},
		{"redis", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			transporttest.RequireBroker(t, "redis", "127.0.0.1:6379")
			log := redisstream.WithLogger(lg)
			_, e1 := redisstream.New(ctx, "redis://"+user+":"+pass+"@127.0.0.1:6379/0?token="+token, log)
			_, e2 := redisstream.New(ctx, "redis://"+user+":"+pass+"@127.0.0.1:6379/0?count="+value, log)
			var e3, e4 error
			// Without allow_plaintext_auth, credentials over redis:// are
			// refused before any connection (e1, e2); with it, the broker
			// refuses them (e3) or the dial fails (e4).
			if tr, err := redisstream.New(ctx, "redis://"+user+":"+pass+"@127.0.0.1:6379/0?allow_plaintext_auth=true&client_name="+token, log); err != nil {
				e3 = err // wrong credentials, found at New
			} else {
				e3 = tr.Publish(ctx, &handler.Message{ID: "a", Topic: transporttest.UniqueName(t, "leak"), Payload: []byte("x")})
				_ = tr.Close(ctx)
			}
			requireAuth(t, "redis", e3)
			if tr, err := redisstream.New(ctx, "redis://"+user+":"+pass+"@"+refused(t)+"/0?allow_plaintext_auth=true", log); err != nil {
				e4 = err
			} else {
				e4 = tr.Publish(ctx, &handler.Message{ID: "a", Topic: "t", Payload: []byte("x")})
				_ = tr.Close(ctx)
			}
			_, e5 := transport.Open(ctx, "rediss://"+user+":"+pass+"@"+refused(t)+"/0?token="+token)
			tr, err := redisstream.New(ctx, "redis://127.0.0.1:6379/0?client_name="+token, log)
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, e3, e4, e5, subscribeBad(ctx, tr, transporttest.UniqueName(t, "leak"))}, closedPublish(ctx, tr, "t")...)
		}},
		{"rabbitmq", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			transporttest.RequireBroker(t, "rabbitmq", "127.0.0.1:5672")
			log := rabbitmq.WithLogger(lg)
			_, e1 := rabbitmq.New(ctx, "amqp://"+user+":"+pass+"@127.0.0.1:5672/?token="+token, log)
			_, e2 := rabbitmq.New(ctx, "amqp://"+user+":"+pass+"@127.0.0.1:5672/?heartbeat="+value, log)
			// With allow_plaintext_auth, so that the broker's refusal (e3)
			// and the refused dial (e4) are reached: without it New
			// refuses the URL first.
			_, e3 := rabbitmq.New(ctx, "amqp://"+user+":"+pass+"@127.0.0.1:5672/?allow_plaintext_auth=true", log) // wrong credentials
			requireAuth(t, "rabbitmq", e3)
			_, e4 := rabbitmq.New(ctx, "amqp://"+user+":"+pass+"@"+refused(t)+"/?allow_plaintext_auth=true", log)
			_, e5 := transport.Open(ctx, "amqps://"+user+":"+pass+"@"+refused(t)+"/?token="+token)
			tr, err := rabbitmq.New(ctx, "amqp://guest:guest@127.0.0.1:5672/", log)
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, e3, e4, e5, subscribeBad(ctx, tr, transporttest.UniqueName(t, "leak"))}, closedPublish(ctx, tr, "t")...)
		}},
		{"mqtt", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			transporttest.RequireBroker(t, "mosquitto", "127.0.0.1:1883")
			opts := []mqtt.Option{mqtt.WithLogger(lg), mqtt.ConnectTimeout(3 * time.Second)}
			_, e1 := mqtt.New(ctx, "mqtt://"+user+":"+pass+"@127.0.0.1:1883?token="+token, opts...)
			_, e2 := mqtt.New(ctx, "mqtt://"+user+":"+pass+"@127.0.0.1:1883?keepalive="+value, opts...)
			_, e3 := mqtt.New(ctx, "mqtt://"+user+":"+pass+"@"+refused(t), opts...)
			_, e4 := transport.Open(ctx, "mqtts://"+user+":"+pass+"@"+refused(t)+"?token="+token)
			tr, err := mqtt.New(ctx, "mqtt://"+user+":"+pass+"@127.0.0.1:1883?client_id="+transporttest.UniqueName(t, "leak"), append(opts, mqtt.RemoveSessionsOnClose())...)
			if err != nil {
				e5 := err // a broker that checks passwords refuses them
				return []error{e1, e2, e3, e4, e5}
			}
			return append([]error{e1, e2, e3, e4, subscribeBad(ctx, tr, "ferry-test/leak")}, closedPublish(ctx, tr, "ferry-test/leak")...)
		}},
		{"jetstream", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			transporttest.RequireBroker(t, "nats", "127.0.0.1:4222")
			log := jetstream.WithLogger(lg)
			_, e1 := jetstream.New(ctx, "nats://"+user+":"+pass+"@127.0.0.1:4222?token="+token, log)
			_, e2 := jetstream.New(ctx, "nats://"+user+":"+pass+"@127.0.0.1:4222?timeout="+value, log)
			// With allow_plaintext_auth, so that the refused dial is reached
			// (without it New refuses the URL first).
			_, e3 := jetstream.New(ctx, "nats://"+user+":"+pass+"@"+refused(t)+"?allow_plaintext_auth=true", log)
			_, e4 := jetstream.New(ctx, "nats://"+token+"@"+refused(t)+"?allow_plaintext_auth=true", log) // a lone token
			_, e5 := transport.Open(ctx, "nats://"+user+":"+pass+"@"+refused(t)+"?allow_plaintext_auth=true&token="+token)
			tr, err := jetstream.New(ctx, "nats://127.0.0.1:4222?name="+token, log)
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, e3, e4, e5, subscribeBad(ctx, tr, transporttest.UniqueName(t, "leak"))}, closedPublish(ctx, tr, "leak")...)
		}},
		{"sqs", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			srv := fauxqs.ForTest(t)
			end := strings.Replace(srv.URL, "http://", "http://"+user+":"+inner+"@", 1)
			short := []sqs.Option{sqs.WithLogger(lg), sqs.CallTimeout(3 * time.Second), sqs.AllowPlaintextAuth(true)}
			_, e1 := sqs.New(ctx, "sqs://?region=eu-west-1&endpoint="+end+"&token="+token, short...)
			_, e2 := sqs.New(ctx, "sqs://?region=eu-west-1&endpoint="+end+"&visibility="+value, short...)
			_, e3 := transport.Open(ctx, "sqs://"+user+":"+pass+"@x?region=eu-west-1")
			_, plain := sqs.New(ctx, "sqs://?region=eu-west-1&endpoint="+end, sqs.WithLogger(lg)) // refused: http:// without the opt-in
			var e4 error
			if tr, err := sqs.New(ctx, "sqs://?region=eu-west-1&endpoint=http://"+user+":"+inner+"@"+refused(t), short...); err != nil {
				e4 = err
			} else {
				e4 = tr.Publish(ctx, &handler.Message{ID: "a", Topic: "q", Payload: []byte("x")})
				_ = tr.Close(ctx)
			}
			tr, err := sqs.New(ctx, "sqs://?region=eu-west-1&endpoint="+end, short...)
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, e3, e4, plain, subscribeBad(ctx, tr, transporttest.UniqueName(t, "leak"))}, closedPublish(ctx, tr, "q")...)
		}},
		{"sns", func(t *testing.T, ctx context.Context, lg *slog.Logger) []error {
			srv := fauxqs.ForTest(t)
			end := strings.Replace(srv.URL, "http://", "http://"+user+":"+inner+"@", 1)
			short := []sns.Option{sqs.WithLogger(lg), sqs.CallTimeout(3 * time.Second), sqs.AllowPlaintextAuth(true)}
			_, e1 := sns.New(ctx, "sns://?region=eu-west-1&endpoint="+end+"&token="+token, short...)
			_, e2 := transport.Open(ctx, "sns://"+user+":"+pass+"@x?region=eu-west-1")
			var e3 error
			if tr, err := sns.New(ctx, "sns://?region=eu-west-1&endpoint=http://"+user+":"+inner+"@"+refused(t), short...); err != nil {
				e3 = err
			} else {
				e3 = tr.Publish(ctx, &handler.Message{ID: "a", Topic: "t", Payload: []byte("x")})
				_ = tr.Close(ctx)
			}
			tr, err := sns.New(ctx, "sns://?region=eu-west-1&endpoint="+end, short...)
			if err != nil {
				t.Fatal(err)
			}
			return append([]error{e1, e2, e3, subscribeBad(ctx, tr, transporttest.UniqueName(t, "leak"))}, closedPublish(ctx, tr, "t")...)
		}},
	}
}

// TestNoCredentialLeaks runs each transport's failure paths with a secret
// in every part of the URL and checks that no error and no log line shows
// one: the transport's injected logger, slog.Default, and the process's
// standard error, where client libraries (go-redis, the AWS SDK) log on
// their own. The cases run one after another, as they replace process-wide
// outputs. Static AWS credentials come from the environment, so that the
// SQS and SNS calls reach the endpoint under test.
func TestNoCredentialLeaks(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, c := range newCases() {
		t.Run(c.name, func(t *testing.T) {
			var logs capture
			lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			old := slog.Default()
			slog.SetDefault(lg)
			defer slog.SetDefault(old)
			stderr := captureStderr(t, &logs)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := c.run(t, ctx, lg)
			time.Sleep(200 * time.Millisecond) // background loggers of closed transports
			stderr()
			check(t, c.name, errs, logs.String())
		})
	}
}

// captureStderr copies what the process writes to its standard error (file
// descriptor 2) into w until the returned function is called.
func captureStderr(t *testing.T, w *capture) (stop func()) {
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(pw.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(w, r)
		close(done)
	}()
	return func() {
		_ = syscall.Dup2(saved, 2)
		_ = syscall.Close(saved)
		_ = pw.Close()
		<-done
		_ = r.Close()
	}
}

// leakyTB records the check's failures instead of failing.
type leakyTB struct {
	testing.TB
	errs []string
}

func (l *leakyTB) Helper()                        {}
func (l *leakyTB) Logf(string, ...any)            {}
func (l *leakyTB) Errorf(format string, a ...any) { l.errs = append(l.errs, fmt.Sprintf(format, a...)) }

// TestCheckCatchesLeaks: the check fails for a transport that puts the URL
// in an error, one that logs it, and one whose failure paths do not fail.
func TestCheckCatchesLeaks(t *testing.T) {
	raw := "redis://" + user + ":" + pass + "@127.0.0.1:1/0?token=" + token
	for _, c := range []struct {
		name string
		errs []error
		logs string
		want string
	}{
		{"error", []error{fmt.Errorf("dial %s: refused", raw)}, "", "an error shows a secret"},
		{"log", []error{errors.New("refused")}, "level=WARN msg=reconnecting url=" + raw + "\n", "a log line shows a secret"},
		{"nothing failed", []error{nil}, "", "no failure path failed"},
	} {
		l := &leakyTB{TB: t}
		check(l, c.name, c.errs, c.logs)
		if !strings.Contains(strings.Join(l.errs, "\n"), c.want) {
			t.Errorf("%s: the check reported %q; want %q", c.name, l.errs, c.want)
		}
	}
}

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }
