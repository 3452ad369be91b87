package sns_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport/sns"
	"github.com/ferrymq/ferry/transport/sqs"
)

func TestMain(m *testing.M) { os.Exit(fauxqs.Main(m)) }

// open returns a Transport on the test emulator, closed when tb ends.
func open(tb testing.TB, opts ...sns.Option) *sns.Transport {
	tb.Helper()
	srv := fauxqs.ForTest(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := sns.New(ctx, "sns://", append([]sns.Option{sqs.WithConfig(srv.Config()), sqs.AllowPlaintextAuth(true), sqs.WaitTime(time.Second)}, opts...)...)
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
