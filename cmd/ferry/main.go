package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"

	"github.com/ferrymq/ferry/cmd/ferry/internal/ops"
	"github.com/ferrymq/ferry/transport"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// quietLibraries keeps the client libraries' own loggers off stderr: the
// command reports every failure itself, in one line. --verbose lets
// Ferry's warnings (slog) through.
func quietLibraries(verbose bool) {
	goredis.SetLogger(&logging.VoidLogger{})
	if !verbose {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
}

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// app is one run of the command: its flags and streams.
type app struct {
	url, parking, inbox, output string
	verbose                     bool
	in                          io.Reader
	out, errw                   io.Writer
	tty                         bool // stderr is a terminal: show progress
}

// usageError marks an error of the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func run(args []string, in io.Reader, out, errw io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{in: in, out: out, errw: errw}
	if f, ok := errw.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			a.tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errw)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ue usageError
	code := exitFailed
	if errors.As(err, &ue) || errors.Is(err, ops.ErrUsage) || isFlagError(err) {
		code = exitUsage
	}
	fmt.Fprintln(errw, "ferry: "+oneLine(a.scrub(err.Error())))
	return code
}

// isFlagError reports whether err is cobra's or pflag's complaint about
// the command line.
func isFlagError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "required flag", "if any flags in the group"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// oneLine folds an error onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// scrub removes the URLs' passwords from s, should anything have quoted one.
func (a *app) scrub(s string) string {
	for _, raw := range []string{a.url, a.parking, a.inbox} {
		if raw == "" {
			continue
		}
		s = strings.ReplaceAll(s, raw, transport.RedactString(raw))
		if i := strings.Index(raw, "://"); i >= 0 {
			if at := strings.LastIndex(raw, "@"); at > i {
				user, pw, ok := strings.Cut(raw[i+3:at], ":")
				if ok && pw != "" {
					s = strings.ReplaceAll(s, pw, "xxxxx")
				}
				if len(user) > 2 {
					s = strings.ReplaceAll(s, user, "xxxxx")
				}
			}
		}
	}
	return s
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Operate Ferry services: dead letters, parked keys, lag, offsets, publish, tail, semantics",
		Long: `ferry operates the brokers and stores of Ferry services, on every transport, by URL.

The broker is --url (or FERRY_URL), the parking lot --parking (or FERRY_PARKING).
Output is a table, or JSON with -o json. Exit codes: 0 done, 1 failed, 2 bad usage.`,
		Example: `  export FERRY_URL=redis://127.0.0.1:6379
  ferry dlq ls --group inventory
  ferry parked ls --parking postgres://127.0.0.1:5432/test
  ferry lag --topic orders --group inventory`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.url, "url", os.Getenv("FERRY_URL"), "broker URL (default $FERRY_URL)")
	root.PersistentFlags().StringVar(&a.parking, "parking", os.Getenv("FERRY_PARKING"), "parking lot DSN: postgres://… or redis://… (default $FERRY_PARKING)")
	root.PersistentFlags().StringVar(&a.inbox, "inbox", os.Getenv("FERRY_INBOX"), "dedupe inbox DSN, postgres://…[?table=…] (default $FERRY_INBOX); read by ferry console")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "let the transports' warnings through to stderr")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		quietLibraries(a.verbose)
		if c.Flags().Changed("inbox") && c.Name() != "console" {
			return usageError{fmt.Errorf("--inbox: only ferry console reads the inbox")}
		}
		if a.output != "table" && a.output != "json" {
			return usageError{fmt.Errorf("-o %q: want table or json", a.output)}
		}
		return nil
	}
	root.AddCommand(a.dlqCmd(), a.parkedCmd(), a.lagCmd(), a.offsetsCmd(), a.publishCmd(), a.tailCmd(), a.semanticsCmd(), a.consoleCmd())
	return root
}

// open opens the broker of --url.
func (a *app) open(ctx context.Context) (transport.Transport, func(), error) {
	t, err := ops.Open(ctx, a.url)
	if err != nil {
		return nil, nil, err
	}
	return t, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ops.DefaultTimeout)
		defer cancel()
		_ = t.Close(cctx)
	}, nil
}

// json prints v as indented JSON.
func (a *app) json(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under header, aligned.
func (a *app) table(header []string, rows [][]string) {
	w := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
}

// progress returns a progress bar on stderr when it is a terminal, and nil
// (no output) otherwise.
func (a *app) progress(what string) (ops.Progress, func()) {
	if !a.tty {
		return nil, func() {}
	}
	return func(done, total int) {
			const width = 30
			fill := 0
			if total > 0 {
				fill = done * width / total
			}
			fmt.Fprintf(a.errw, "\r%s [%s%s] %d/%d", what, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total)
		}, func() {
			fmt.Fprint(a.errw, "\r\033[K")
		}
}
