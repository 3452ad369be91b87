package awsconf

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/sqs/wire"
)

// Defaults of a configuration, documented on the options of package sqs.
const (
	DefaultPublishCalls    = 8
	DefaultCallTimeout     = 30 * time.Second
	DefaultMaxExtension    = 30 * time.Minute
	DefaultWait            = 20 * time.Second
	DefaultPollers         = 4
	DefaultMaxInFlight     = 100
	DefaultMaxReceiveCount = 5
	DefaultPublishWindow   = 1024
)

// An Option configures an sqs or sns transport. It is sealed: only this
// package makes them, and package sqs exports each under its own name.
type Option interface{ apply(*Config) }

type optionFunc func(*Config)

func (f optionFunc) apply(c *Config) { f(c) }

// Config is the configuration of one sqs or sns transport, checked once by
// [Parse].
type Config struct {
	Scheme        string      // "sqs" or "sns", the prefix of errors
	AWS           *aws.Config // WithConfig; nil: the standard chain
	Region        string
	Endpoint      string
	Profile       string
	Log           *slog.Logger
	AutoCreate    bool
	IDAttribute   string
	NumberHeaders []string
	ContentDedupe bool
	PublishCalls  int
	PublishWindow int
	CallTimeout   time.Duration
	// PlaintextAuth lets signed requests go to an http:// endpoint
	// ([AllowPlaintextAuth]).
	PlaintextAuth bool
	Sub           Sub

	err    error
	loaded bool // AWS is the result of Load already (Use)
}

// Sub is the subscriber part of a Config; Subscription.Options override it
// per subscription ([Config.ParseSub]).
type Sub struct {
	Visibility   time.Duration // 0: the queue's VisibilityTimeout
	MaxExtension time.Duration // 0: lease extension off
	Wait         time.Duration
	Pollers      int
	MaxInFlight  int
	// DLQ names the DLQ; "" is the default name ([DLQName]).
	DLQ string
	// MaxReceiveCount is the redrive policy's maxReceiveCount; 0 means the
	// subscription attaches no redrive policy.
	MaxReceiveCount int
}

// Redrive reports whether the subscription attaches a redrive policy.
func (s Sub) Redrive() bool { return s.MaxReceiveCount > 0 }

// Default returns the defaults of a transport of scheme.
func Default(scheme string) Config {
	return Config{
		Scheme:        scheme,
		AutoCreate:    true,
		PublishCalls:  DefaultPublishCalls,
		PublishWindow: DefaultPublishWindow,
		CallTimeout:   DefaultCallTimeout,
		Sub: Sub{
			MaxExtension: DefaultMaxExtension,
			Wait:         DefaultWait,
			Pollers:      DefaultPollers,
			MaxInFlight:  DefaultMaxInFlight,
		},
	}
}

// Fail records the first configuration error, wrapping
// transport.ErrInvalidOption and prefixed with the scheme.
func (c *Config) Fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s: "+format, append([]any{transport.ErrInvalidOption, c.Scheme}, args...)...)
	}
}

// Err returns the first configuration error.
func (c *Config) Err() error { return c.err }

// Apply applies opts in order; a nil Option is an error.
func (c *Config) Apply(opts ...Option) {
	for _, o := range opts {
		if o == nil {
			c.Fail("nil Option")
			continue
		}
		o.apply(c)
	}
}

// WithConfig: see sqs.WithConfig.
func WithConfig(cfg aws.Config) Option {
	return optionFunc(func(c *Config) { c.AWS = &cfg })
}

// Region: see sqs.Region.
func Region(r string) Option {
	return optionFunc(func(c *Config) {
		if r == "" {
			c.Fail("Region: empty region")
			return
		}
		c.Region = r
	})
}

// Endpoint: see sqs.Endpoint. The value is never repeated in an error: an
// endpoint may carry user-info.
func Endpoint(u string) Option {
	return optionFunc(func(c *Config) {
		p, err := url.ParseRequestURI(u)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") {
			c.Fail("Endpoint: want an absolute http or https URL such as http://127.0.0.1:4566")
			return
		}
		c.Endpoint = u
	})
}

// Profile: see sqs.Profile.
func Profile(name string) Option {
	return optionFunc(func(c *Config) {
		if name == "" {
			c.Fail("Profile: empty profile name")
			return
		}
		c.Profile = name
	})
}

// WithLogger: see sqs.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *Config) {
		if l == nil {
			c.Fail("WithLogger(nil): want a logger (the default is slog.Default())")
			return
		}
		c.Log = l
	})
}

// AutoCreate: see sqs.AutoCreate.
func AutoCreate(on bool) Option { return optionFunc(func(c *Config) { c.AutoCreate = on }) }

// IDAttribute: see sqs.IDAttribute.
func IDAttribute(name string) Option {
	return optionFunc(func(c *Config) {
		if !wire.ValidName(name) {
			c.Fail("IDAttribute(%q): not a valid message attribute name", name)
			return
		}
		c.IDAttribute = name
	})
}

// NumberHeaders: see sqs.NumberHeaders.
func NumberHeaders(names ...string) Option {
	return optionFunc(func(c *Config) {
		for _, n := range names {
			if n == "" {
				c.Fail("NumberHeaders: empty header name")
				return
			}
		}
		c.NumberHeaders = append(c.NumberHeaders, names...)
	})
}

// ContentDedupe: see sqs.ContentDedupe.
func ContentDedupe(on bool) Option { return optionFunc(func(c *Config) { c.ContentDedupe = on }) }

// PublishConcurrency: see sqs.PublishConcurrency.
func PublishConcurrency(n int) Option {
	return optionFunc(func(c *Config) {
		if n < 1 {
			c.Fail("PublishConcurrency(%d): want 1 or more", n)
			return
		}
		c.PublishCalls = n
	})
}

// PublishWindow: see sqs.PublishWindow.
func PublishWindow(n int) Option {
	return optionFunc(func(c *Config) {
		if n < 10 {
			c.Fail("PublishWindow(%d): want 10 (one SendMessageBatch) or more", n)
			return
		}
		c.PublishWindow = n
	})
}

// CallTimeout: see sqs.CallTimeout.
func CallTimeout(d time.Duration) Option {
	return optionFunc(func(c *Config) {
		if d <= 0 {
			c.Fail("CallTimeout(%s): want more than 0", d)
			return
		}
		c.CallTimeout = d
	})
}

// AllowPlaintextAuth: see sqs.AllowPlaintextAuth.
func AllowPlaintextAuth(allow bool) Option {
	return optionFunc(func(c *Config) { c.PlaintextAuth = allow })
}

// Visibility: see sqs.Visibility.
func Visibility(d time.Duration) Option {
	return optionFunc(func(c *Config) {
		if d < time.Second || d > 12*time.Hour || d%time.Second != 0 {
			c.Fail("Visibility(%s): want whole seconds from 1s to 12h", d)
			return
		}
		c.Sub.Visibility = d
	})
}

// MaxExtension: see sqs.MaxExtension.
func MaxExtension(d time.Duration) Option {
	return optionFunc(func(c *Config) {
		if d < 0 || d > 12*time.Hour {
			c.Fail("MaxExtension(%s): want 0 (off) to 12h", d)
			return
		}
		c.Sub.MaxExtension = d
	})
}

// WaitTime: see sqs.WaitTime.
func WaitTime(d time.Duration) Option {
	return optionFunc(func(c *Config) {
		if d < 0 || d > 20*time.Second || d%time.Second != 0 {
			c.Fail("WaitTime(%s): want whole seconds from 0s to 20s", d)
			return
		}
		c.Sub.Wait = d
	})
}

// Pollers: see sqs.Pollers.
func Pollers(n int) Option {
	return optionFunc(func(c *Config) {
		if n < 1 {
			c.Fail("Pollers(%d): want 1 or more", n)
			return
		}
		c.Sub.Pollers = n
	})
}

// MaxInFlight: see sqs.MaxInFlight.
func MaxInFlight(n int) Option {
	return optionFunc(func(c *Config) {
		if n < 1 {
			c.Fail("MaxInFlight(%d): want 1 or more", n)
			return
		}
		c.Sub.MaxInFlight = n
	})
}

// DeadLetterQueue: see sqs.DeadLetterQueue.
func DeadLetterQueue(dlq string, maxReceiveCount int) Option {
	return optionFunc(func(c *Config) {
		if maxReceiveCount < 1 || maxReceiveCount > 1000 {
			c.Fail("DeadLetterQueue: maxReceiveCount %d: want 1 to 1000", maxReceiveCount)
			return
		}
		if dlq != "" && !ValidQueueName(dlq) {
			c.Fail("DeadLetterQueue(%q): not a valid queue name (up to 80 letters, digits, - and _, then .fifo for FIFO)", dlq)
			return
		}
		c.Sub.DLQ, c.Sub.MaxReceiveCount = dlq, maxReceiveCount
	})
}

// Use replaces the whole configuration with c, whose AWS configuration
// loaded was made by c.Load already. Package sns opens its SQS side with
// it, so that both sides share one configuration and one set of clients'
// settings.
func Use(c Config, loaded aws.Config) Option {
	return optionFunc(func(dst *Config) {
		*dst = c
		dst.AWS, dst.loaded = &loaded, true
	})
}
