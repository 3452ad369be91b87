package awsconf

import (
	"strings"

	"github.com/ferrymq/ferry/transport"
)

// URL query keys, each mapping to one Option. The subscriber keys
// (visibility through max_receive_count) are also Subscription.Options keys.
const (
	KeyRegion             = "region"
	KeyEndpoint           = "endpoint"
	KeyProfile            = "profile"
	KeyCreate             = "create"
	KeyIDAttribute        = "id_attribute"
	KeyNumberHeaders      = "number_headers"
	KeyContentDedupe      = "content_dedupe"
	KeyPublishConcurrency = "publish_concurrency"
	KeyPublishWindow      = "publish_window"
	KeyCallTimeout        = "call_timeout"
	KeyPlaintextAuth      = "allow_plaintext_auth"
	KeyVisibility         = "visibility"
	KeyMaxExtension       = "max_extension"
	KeyWait               = "wait"
	KeyPollers            = "pollers"
	KeyMaxInFlight        = "max_in_flight"
	KeyDLQ                = "dlq"
	KeyMaxReceiveCount    = "max_receive_count"
)

// urlKeys are the URL's keys of the connection and publishing, each the
// Option of the same name.
var urlKeys = []transport.Key[Option]{
	transport.StringKey(KeyRegion, Region),
	transport.StringKey(KeyEndpoint, Endpoint),
	transport.StringKey(KeyProfile, Profile),
	transport.BoolKey(KeyCreate, AutoCreate),
	transport.StringKey(KeyIDAttribute, IDAttribute),
	transport.StringKey(KeyNumberHeaders, func(v string) Option { return NumberHeaders(strings.Split(v, ",")...) }),
	transport.BoolKey(KeyContentDedupe, ContentDedupe),
	transport.IntKey(KeyPublishConcurrency, PublishConcurrency),
	transport.IntKey(KeyPublishWindow, PublishWindow),
	transport.DurationKey(KeyCallTimeout, CallTimeout),
	transport.BoolKey(KeyPlaintextAuth, AllowPlaintextAuth),
}

// subKeys are the subscriber keys that map one to one onto an Option (dlq
// and max_receive_count are read apart: they make one).
var subKeys = []transport.Key[Option]{
	transport.DurationKey(KeyVisibility, Visibility),
	transport.DurationKey(KeyMaxExtension, MaxExtension),
	transport.DurationKey(KeyWait, WaitTime),
	transport.IntKey(KeyPollers, Pollers),
	transport.IntKey(KeyMaxInFlight, MaxInFlight),
}

// Parse reads rawURL, scheme://[label][?key=value&…], into a Config, then
// applies opts: the one path by which the sqs and sns transports are
// configured, from New and from transport.Open alike. The host is a label
// only (queues and topics are named per message and per subscription); a
// path, user-info or an unknown, repeated or malformed key is an error
// wrapping transport.ErrInvalidOption.
func Parse(scheme, rawURL string, opts []Option) (Config, error) {
	c := Default(scheme)
	u, err := transport.ParseURL(scheme, rawURL, scheme)
	if err != nil {
		return c, err
	}
	if u.User != nil {
		c.Fail("credentials in the URL are not supported: use the AWS configuration chain (environment, shared files, profile=, roles)")
		return c, c.err
	}
	if u.Path != "" && u.Path != "/" {
		c.Fail("unexpected URL path: the URL names no queue or topic (%s://[label]?key=value)", scheme)
		return c, c.err
	}
	q := transport.ParseQuery(scheme, u.RawQuery)
	for _, o := range transport.Options(q, urlKeys...) {
		o.apply(&c)
	}
	c.readSub(q)
	if err := q.Err(); err != nil {
		return c, err
	}
	if c.err != nil {
		return c, c.err
	}
	c.Apply(opts...)
	return c, c.err
}

// readSub reads the subscriber keys of q into c.
func (c *Config) readSub(q *transport.Query) {
	for _, o := range transport.Options(q, subKeys...) {
		o.apply(c)
	}
	// dlq and max_receive_count make one Option; either alone keeps the
	// other from the transport's settings (or its default).
	dlq, hasDLQ := q.String(KeyDLQ)
	n, hasCount := q.Int(KeyMaxReceiveCount)
	if !hasDLQ && !hasCount {
		return
	}
	if hasDLQ && dlq == "" {
		q.Fail(KeyDLQ, "empty queue name")
		return
	}
	if !hasDLQ {
		dlq = c.Sub.DLQ
	}
	if !hasCount {
		n = c.Sub.MaxReceiveCount
		if n == 0 {
			n = DefaultMaxReceiveCount
		}
	}
	DeadLetterQueue(dlq, n).apply(c)
}

// ParseSub returns the subscriber settings of a subscription whose
// Options were read into q (transport.OptionsQuery), over c's: the keys
// visibility, max_extension, wait, pollers, max_in_flight, dlq and
// max_receive_count. A caller with keys of its own (sns: queue,
// filter_policy) reads them from q first. It reports q.Err() too.
func (c Config) ParseSub(q *transport.Query) (Sub, error) {
	c.err = nil
	c.readSub(q)
	if err := q.Err(); err != nil {
		return c.Sub, err
	}
	return c.Sub, c.err
}
