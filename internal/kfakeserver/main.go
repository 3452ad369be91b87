// Command kfakeserver runs an in-process Kafka protocol implementation
// (franz-go's kfake) as a separate process, for interop tests with
// clients that cannot run in a Go test process, such as kcat.
//
// It listens on 127.0.0.1 only, prints "ready <addr>[,<addr>...]" on
// stdout once it accepts connections, and exits on SIGTERM or SIGINT, or
// when its stdin closes with -stdin. Nothing is kept on disk.
//
//	go run ./internal/kfakeserver -port 19092 -partitions 6
//
// It is for tests only: kfake is not a performance reference for Kafka.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "port of the first broker (0 picks a free one)")
	brokers := flag.Int("brokers", 1, "number of brokers (on consecutive ports when -port is set)")
	partitions := flag.Int("partitions", 6, "partitions of auto-created topics")
	stdin := flag.Bool("stdin", false, "exit when stdin closes (so that a parent's death stops the server)")
	flag.Parse()

	opts := []kfake.Opt{
		kfake.NumBrokers(*brokers),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	if *port != 0 {
		ports := make([]int, *brokers)
		for i := range ports {
			ports[i] = *port + i
		}
		opts = append(opts, kfake.Ports(ports...)) // kfake binds 127.0.0.1 only
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeserver:", err)
		os.Exit(1)
	}
	fmt.Println("ready", strings.Join(c.ListenAddrs(), ","))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if *stdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop <- syscall.SIGTERM
		}()
	}
	<-stop
	c.Close()
}
