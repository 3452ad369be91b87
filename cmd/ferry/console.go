package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferrymq/ferry/cmd/ferry/internal/console"
	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/parking"
	"github.com/ferrymq/ferry/transport"
)

// consoleTokenEnv names the environment variable of the console's
// operator token.
const consoleTokenEnv = "FERRY_CONSOLE_TOKEN"

func (a *app) consoleCmd() *cobra.Command {
	var listen, token, topic, group string
	var subs []string
	var interval time.Duration
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve a web page with lag, dead letters, parked keys and semantics",
		Long: `console serves one web page (embedded in the binary: no build step, nothing
from the network) over the same operations as the other commands: each group's
lag and throughput as live charts, its dead letters with their failure record,
headers and payload (shown as text), replay of one, a key, a selection or the
dead letters that first failed in a time range; the parked keys of --parking
with release (carried out in order by the running consumers) and drop (with an
audit record); the dedupe records of --inbox (per namespace, stuck claims,
and whether a message ID was processed); and the declared semantics.

It listens on loopback by default. Listening anywhere else, a write action
(replay, release, drop) needs the operator token: --token or, better (it
stays out of the process list), $` + consoleTokenEnv + `; without one the page
is read-only there. Every write also needs the page's CSRF token.`,
		Example: `  ferry console --url redis://127.0.0.1:6379 --parking redis://127.0.0.1:6379 \
      --inbox postgres://127.0.0.1:5432/orders --sub orders:inventory --sub orders:email
  ` + consoleTokenEnv + `=$(openssl rand -hex 16) ferry console --listen 0.0.0.0:8090 \
      --url kafka://broker:9092 --topic orders --group inventory`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv(consoleTokenEnv)
			}
			var specs []transport.Subscription
			if topic != "" {
				specs = append(specs, transport.Subscription{Topic: topic, Group: group})
			} else if group != "" {
				return usageError{fmt.Errorf("--group needs --topic (or use --sub TOPIC:GROUP)")}
			}
			for _, s := range subs {
				t, g, _ := strings.Cut(s, ":")
				if t == "" {
					return usageError{fmt.Errorf("--sub %q: want TOPIC:GROUP", s)}
				}
				specs = append(specs, transport.Subscription{Topic: t, Group: g})
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageError{fmt.Errorf("--listen %q: want HOST:PORT", listen)}
			}
			t, closeT, err := a.open(c.Context())
			if err != nil {
				return err
			}
			defer closeT()
			var lot parking.Lot
			if a.parking != "" {
				l, err := ops.OpenLot(c.Context(), a.parking)
				if err != nil {
					return err
				}
				defer l.Close()
				lot = l
			}
			var inbox console.Inbox
			if a.inbox != "" {
				in, err := ops.OpenInbox(c.Context(), a.inbox)
				if err != nil {
					return err
				}
				defer in.Close()
				inbox = console.InboxOf(in)
			}
			o, err := console.NewOperations(t, lot, specs)
			if err != nil {
				return usageError{err}
			}
			cfg := console.Config{
				Listen: listen, Token: token, URL: transport.RedactString(a.url),
				Secrets: passwords(a.url, a.parking, a.inbox), Monitor: o, DeadLetters: o, Inbox: inbox,
				Interval: interval, Logger: slog.New(slog.NewTextHandler(a.errw, nil)),
			}
			if lot != nil {
				cfg.Lot = o
			}
			srv, err := console.New(cfg)
			if err != nil {
				return usageError{err}
			}
			if len(specs) == 0 {
				fmt.Fprintln(a.errw, "ferry console: no group to chart: give --topic/--group or --sub TOPIC:GROUP")
			}
			return srv.Run(c.Context(), func(addr net.Addr) {
				fmt.Fprintf(a.out, "ferry console on http://%s/ (Ctrl-C to stop)\n", listenURLHost(listen, addr))
			})
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "address to serve the page on")
	c.Flags().StringVar(&token, "token", "", "operator token that write actions need (default $"+consoleTokenEnv+"); required for writes beyond loopback")
	c.Flags().StringVar(&topic, "topic", "", "topic of the group to show")
	c.Flags().StringVar(&group, "group", "", "consumer group to show (with --topic)")
	c.Flags().StringArrayVar(&subs, "sub", nil, "a group to show, as TOPIC:GROUP (repeatable)")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to read the lag for the charts")
	return c
}

// listenURLHost is the host:port to print for the page: the address
// listened on, with a wildcard host shown as 127.0.0.1.
func listenURLHost(listen string, addr net.Addr) string {
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	host, _, _ := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// passwords returns the passwords in the URLs (user-info, and query keys
// named like a secret), for the console to keep out of what it sends to
// the page.
func passwords(urls ...string) []string {
	var out []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p)
			}
		}
		for k, v := range u.Query() {
			k = strings.ToLower(k)
			if !strings.Contains(k, "pass") && !strings.Contains(k, "secret") && !strings.Contains(k, "token") {
				continue
			}
			for _, s := range v {
				if s != "" {
					out = append(out, s)
				}
			}
		}
	}
	return out
}
