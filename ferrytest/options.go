package ferrytest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/ferrymq/ferry"
	"github.com/ferrymq/ferry/transport"
)

// Defaults of the runners.
const (
	// DefaultSeeds is how many seeds [Check] and [Find] run.
	DefaultSeeds = 1000
	// DefaultMembers is how many consumer processes each [Sim.Consumer]
	// runs in its group.
	DefaultMembers = 2
	// DefaultQuantum is the virtual time a handler turn takes; see
	// [Quantum].
	DefaultQuantum = time.Second
	// DefaultMaxSteps bounds a run; see [MaxSteps].
	DefaultMaxSteps = 20000
)

// Environment variables the runners read, so that a failing seed is
// replayed without editing the test.
const (
	// EnvSeed, when set to a seed, makes Check and Find run only
	// that seed, and Check log its whole trace.
	EnvSeed = "FERRYTEST_SEED"
	// EnvSeeds, when set to a number, overrides the number of seeds.
	EnvSeeds = "FERRYTEST_SEEDS"
)

// An Option configures a runner ([Check], [Find], [Replay]). Options are
// made by the functions of this package.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	seeds     int
	first     uint64
	members   int
	quantum   time.Duration
	maxSteps  int
	faults    map[Fault]bool
	logger    *slog.Logger
	logSet    bool // WithLogger was given
	routerOpt []ferry.Option
	err       error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: ferrytest: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
}

// Seeds sets how many seeds [Check] and [Find] run: seeds first, first+1,
// ... (see [FirstSeed]). The default is 1000 ([DefaultSeeds]); the
// environment variable FERRYTEST_SEEDS overrides it. n must be positive.
func Seeds(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("Seeds(%d): want 1 or more", n)
			return
		}
		c.seeds = n
	})
}

// FirstSeed sets the first seed [Check] and [Find] run (default 1).
func FirstSeed(seed uint64) Option {
	return optionFunc(func(c *config) { c.first = seed })
}

// Members sets how many consumer processes each [Sim.Consumer] runs in its
// group (default 2, [DefaultMembers]). With one, a delivery the broker
// takes back while its handler runs (LeaseExpiry) can only be handled
// after that handler returns; with two, the other member may handle it
// meanwhile. n must be 1 to 8.
func Members(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > 8 {
			c.fail("Members(%d): want 1 to 8", n)
			return
		}
		c.members = n
	})
}

// Quantum sets the virtual time a handler turn takes (default 1s,
// [DefaultQuantum]): after each turn the clock moves on to the next
// multiple of it. Random jitter that the Router's backoff and the retry
// middleware add to their waits within a turn is shorter than the quantum,
// and so never shows in the clock at the next decision; that is what makes
// a run replay exactly. A turn whose waits add up to more than the
// quantum is recorded in [Run].Hazards. d must be at least 1ms.
func Quantum(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.fail("Quantum(%s): want at least 1ms", d)
			return
		}
		c.quantum = d
	})
}

// MaxSteps bounds a run: a run still busy after n scheduler steps (a
// message that is retried for ever, say) fails with a violation that
// says so. The default is 20,000 ([DefaultMaxSteps]).
func MaxSteps(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("MaxSteps(%d): want 1 or more", n)
			return
		}
		c.maxSteps = n
	})
}

// Faults sets the faults the simulator injects; each is still injected
// only where the profile allows it. The default is [AllFaults]; Faults()
// with none runs without faults, delivering in publish order.
func Faults(f ...Fault) Option {
	return optionFunc(func(c *config) {
		c.faults = make(map[Fault]bool, len(f))
		for _, x := range f {
			if x < Duplicate || x > Pause {
				c.fail("Faults: unknown %v", x)
				return
			}
			c.faults[x] = true
		}
	})
}

// WithLogger sets the logger of the Routers the simulator runs. The
// default discards their lines: a thousand seeds log a great many expected
// failures, and the run's trace says what happened. Replaying one seed
// with FERRYTEST_SEED logs to slog.Default() instead.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger(nil)")
			return
		}
		c.logger, c.logSet = l, true
	})
}

// RouterOptions adds options to every Router the simulator makes, after
// its own (ferry.WithLogger and a DrainTimeout).
func RouterOptions(opts ...ferry.Option) Option {
	return optionFunc(func(c *config) { c.routerOpt = append(c.routerOpt, opts...) })
}

// newConfig applies opts over the defaults and the environment.
func newConfig(opts []Option) config {
	c := config{seeds: DefaultSeeds, first: 1, members: DefaultMembers, quantum: DefaultQuantum,
		maxSteps: DefaultMaxSteps, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.faults = make(map[Fault]bool, len(AllFaults()))
	for _, f := range AllFaults() {
		c.faults[f] = true
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if os.Getenv(EnvSeed) != "" && !c.logSet {
		c.logger = slog.Default() // one seed: its Routers' lines are worth reading
	}
	if v := os.Getenv(EnvSeeds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			c.fail("%s=%q: want a positive number", EnvSeeds, v)
		} else {
			c.seeds = n
		}
	}
	return c
}

// envSeed returns the seed FERRYTEST_SEED names, if set.
func envSeed() (uint64, bool, error) {
	v := os.Getenv(EnvSeed)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: ferrytest: %s=%q: want a seed (a number)", transport.ErrInvalidOption, EnvSeed, v)
	}
	return n, true, nil
}
