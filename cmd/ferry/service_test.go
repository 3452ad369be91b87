package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/handler"
	"github.com/ferrymq/ferry/middleware"
	"github.com/ferrymq/ferry/transport"
)

// serviceMain is the e2e tests' service: a Router consuming -topic as
// -group through the recommended stack (with key parking when -parking is
// given), whose handler appends each applied message's ID to -applied and
// fails permanently a payload starting with "bad" until the file -fixed
// exists. It writes -ready once subscribed and stops on SIGINT/SIGTERM.
func serviceMain() {
	fs := flag.NewFlagSet("ferry-service", flag.ExitOnError)
	url := fs.String("url", os.Getenv("URL"), "broker URL")
	topic := fs.String("topic", os.Getenv("TOPIC"), "topic")
	group := fs.String("group", os.Getenv("GROUP"), "group")
	lotDSN := fs.String("parking", "", "parking lot DSN")
	applied := fs.String("applied", "applied.txt", "file of applied IDs")
	fixed := fs.String("fixed", "fixed", "file whose existence fixes bad messages")
	ready := fs.String("ready", "ready", "file written once subscribed")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service(ctx, *url, *topic, *group, *lotDSN, *applied, *fixed, *ready); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-service:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func service(ctx context.Context, url, topic, group, lotDSN, appliedFile, fixedFile, readyFile string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t, err := ops.Open(ctx, url)
	if err != nil {
		return err
	}
	defer t.Close(context.Background())
	var mu sync.Mutex
	h := handler.HandlerFunc(func(ctx context.Context, m *handler.Message) error {
		if strings.HasPrefix(string(m.Payload), "bad") {
			if _, err := os.Stat(fixedFile); err != nil {
				return handler.Permanentf("%s: payload %q is rejected until the fix", m.ID, m.Payload)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(appliedFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(f, m.ID)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
	stackOpts := []middleware.StackOption{middleware.WithLogger(log)}
	var subOpts []ferry.SubscriptionOption
	if lotDSN != "" {
		lot, err := ops.OpenLot(ctx, lotDSN)
		if err != nil {
			return err
		}
		defer lot.Close()
		stackOpts = append(stackOpts, middleware.Parking(lot, middleware.ReleaseRequests(50*time.Millisecond)))
		subOpts = append(subOpts, ferry.PerKey())
	}
	mw, err := middleware.Recommended(t, stackOpts...)
	if err != nil {
		return err
	}
	r, err := ferry.NewRouter(ferry.WithLogger(log), ferry.DrainTimeout(5*time.Second))
	if err != nil {
		return err
	}
	if err := r.Add(group, t, transport.Subscription{Topic: topic, Group: group}, mw(h), subOpts...); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Ready():
		if err := os.WriteFile(readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	case err := <-errc:
		return err
	}
	return <-errc
}
