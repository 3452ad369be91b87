package ferrytest

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/ferrymq/ferry/ferrytest/internal/profiles"
	"github.com/ferrymq/ferry/transport"
)

// ErrUnknownProfile is wrapped by the error of a [Profile] that [Like] or
// [FromURL] could not find: the name or scheme has no entry in the table.
// [Profiles] lists the entries.
var ErrUnknownProfile = errors.New("ferrytest: no such profile")

// A Profile is what a simulated broker may do: the [transport.Semantics]
// that a real transport declares, under a name. The simulator reads every
// field it can act on (see "What the simulated broker does" in the package
// documentation) and declares the Semantics unchanged on its streams, so
// the Router and the middleware adapt to it as they would to the real
// transport.
//
// Get one with [Like] (by name), [FromURL] (by a transport URL's scheme) or
// [Declared] (from any [transport.Declarer], for a configuration the table
// does not hold). A Profile is a value; its zero value is invalid.
type Profile struct {
	// Name is the profile's name: "kafka", "sqs-fifo", ...
	Name string
	// Semantics is what the simulated streams declare and the simulator
	// obeys.
	Semantics transport.Semantics
	// DeliveryLimit is the broker's delivery count after which it moves a
	// message to its dead-letter queue by itself, where Semantics.NativeDLQ
	// is true (SQS maxReceiveCount, RabbitMQ x-delivery-limit).
	DeliveryLimit int

	variants []variant // what subscription options select; see For
	err      error
}

// variant is a profile that subscriptions with opts get instead.
type variant struct {
	opts map[string]string
	p    Profile
}

// For returns the profile a subscription sub gets: the profile of p's
// transport that sub.Options select, as the real transport declares
// differently for them (RabbitMQ's "ordered": "false" gives
// "rabbitmq-competing" and "ordered": "true" "rabbitmq"; Redis's "mode":
// "shared" gives "redis-shared" and "exclusive" "redis"), or p itself. Options the table knows nothing of are ignored: they configure
// the broker, not what it may do.
func (p Profile) For(sub transport.Subscription) Profile {
	best, n := p, 0
	for _, v := range p.variants {
		if len(v.opts) <= n {
			continue
		}
		match := true
		for k, want := range v.opts {
			match = match && sub.Options[k] == want
		}
		if match {
			best, n = v.p, len(v.opts)
		}
	}
	return best
}

// Err returns why the profile is invalid ([Like] of an unknown name,
// say), or nil. [Check] and the other runners report it.
func (p Profile) Err() error {
	if p.err != nil {
		return p.err
	}
	if p.Name == "" || p.Semantics.Transport == "" {
		return fmt.Errorf("%w: the zero Profile; use Like, FromURL or Declared", ErrUnknownProfile)
	}
	if p.Semantics.NativeDLQ && p.DeliveryLimit < 1 {
		return fmt.Errorf("%w: profile %q declares a native DLQ but has no DeliveryLimit", transport.ErrInvalidOption, p.Name)
	}
	return nil
}

// String returns the name.
func (p Profile) String() string { return p.Name }

// Like returns the profile of the given name: one of the names [Profiles]
// lists ("memory", "kafka", "sqs", "sqs-fifo", "rabbitmq",
// "rabbitmq-competing", "redis", "redis-shared", "mqtt", "nats",
// "nats-shared"), each the
// Semantics that transport declares with its default URL, and, for the
// variants, the subscription options of their names (see [Profile.For]). An unknown name gives a Profile whose [Profile.Err] wraps
// [ErrUnknownProfile] and lists the names; the runners report it.
func Like(name string) Profile {
	for _, e := range profiles.Table {
		if e.Name == name {
			return profileOf(e)
		}
	}
	return Profile{Name: name, err: fmt.Errorf("%w: %q (profiles: %s)", ErrUnknownProfile, name, strings.Join(names(), ", "))}
}

// FromURL returns the profile of the transport rawURL opens, by its
// scheme: memory://, kafka://, sqs:// and sns:// (a queue's semantics; a
// FIFO queue is Like("sqs-fifo")), amqp:// and amqps:// (RabbitMQ),
// redis:// and rediss://, mqtt:// and mqtts://, nats:// (JetStream). It
// reads only the scheme:
// the profile is the transport's default configuration. Where URL or
// subscription options change what a transport declares (RabbitMQ's
// "ordered", Redis's "mode", a FIFO queue), use the profile of that name
// (or [Profile.For]), or [Declared] with the real transport. An unparsable URL or an
// unknown scheme gives a Profile whose Err says so; the error never
// quotes the URL, which may hold credentials.
func FromURL(rawURL string) Profile {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return Profile{Name: "?", err: fmt.Errorf("%w: cannot parse the transport URL", ErrUnknownProfile)}
	}
	scheme := strings.ToLower(u.Scheme)
	for _, e := range profiles.Table {
		for _, s := range e.Schemes {
			if s == scheme {
				return profileOf(e)
			}
		}
	}
	return Profile{Name: scheme, err: fmt.Errorf("%w: scheme %q (schemes: %s)", ErrUnknownProfile, scheme, strings.Join(schemes(), ", "))}
}

// Declared returns a profile named name with what d declares for sub:
// the exact Semantics of a configured transport, for a configuration the
// table has no profile for. d is typically a real transport that
// declares without I/O (every transport of this module implements
// [transport.Declarer]); deliveryLimit is the broker's delivery limit
// where the declaration has a native DLQ, and is ignored otherwise.
func Declared(name string, d transport.Declarer, sub transport.Subscription, deliveryLimit int) Profile {
	sem, err := d.Declare(sub)
	if err != nil {
		return Profile{Name: name, err: fmt.Errorf("ferrytest: declared profile %q: %w", name, err)}
	}
	p := Profile{Name: name, Semantics: sem}
	if sem.NativeDLQ {
		p.DeliveryLimit = deliveryLimit
	}
	return p
}

// Profiles returns every profile of the table, in the order of the names
// Like accepts.
func Profiles() []Profile {
	out := make([]Profile, len(profiles.Table))
	for i, e := range profiles.Table {
		out[i] = profileOf(e)
	}
	return out
}

// profileOf makes the profile of row e, with the variants of its
// transport: the rows that subscription options select.
func profileOf(e profiles.Entry) Profile {
	p := Profile{Name: e.Name, Semantics: e.Semantics, DeliveryLimit: e.DeliveryLimit}
	for _, o := range profiles.Table {
		if o.Semantics.Transport == e.Semantics.Transport && len(o.Select) > 0 {
			p.variants = append(p.variants, variant{opts: o.Select,
				p: Profile{Name: o.Name, Semantics: o.Semantics, DeliveryLimit: o.DeliveryLimit}})
		}
	}
	return p
}

func names() []string {
	out := make([]string, len(profiles.Table))
	for i, e := range profiles.Table {
		out[i] = e.Name
	}
	return out
}

func schemes() []string {
	var out []string
	for _, e := range profiles.Table {
		out = append(out, e.Schemes...)
	}
	return out
}
