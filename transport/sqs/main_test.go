package sqs_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/ferrymq/ferry/internal/fauxqs"
	"github.com/ferrymq/ferry/transport/sqs"
)

func TestMain(m *testing.M) {
	// An SQS queue is one consumer group: two groups on one queue compete
	// for its messages instead of each receiving all of them, and
	// transport.Semantics has no field to declare that, so the suite's
	// Groups/FanOut case cannot pass or skip by itself. Fan-out is SNS's
	// job (package sns). Leave the case out unless -skip was given.
	flag.Parse()
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		_ = f.Value.Set("^TestConformance$/^Groups$/^FanOut$")
	}
	os.Exit(fauxqs.Main(m))
}

// open returns a Transport on the test emulator, closed when tb ends.
func open(tb testing.TB, opts ...sqs.Option) *sqs.Transport {
	tb.Helper()
	srv := fauxqs.ForTest(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := sqs.New(ctx, append([]sqs.Option{sqs.WithConfig(srv.Config()), sqs.WaitTime(time.Second)}, opts...)...)
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
