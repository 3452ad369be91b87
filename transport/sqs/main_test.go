package sqs_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport/sqs"
)

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }

// open returns a Transport on the test emulator, closed when tb ends. The
// emulator listens on http://127.0.0.1, so it opts in to plaintext
// signed requests.
func open(tb testing.TB, opts ...sqs.Option) *sqs.Transport {
	tb.Helper()
	srv := fauxqs.ForTest(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := sqs.New(ctx, "sqs://", append([]sqs.Option{sqs.WithConfig(srv.Config()), sqs.AllowPlaintextAuth(true), sqs.WaitTime(time.Second)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}
