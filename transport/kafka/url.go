package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymq/ferry/transport"
)

func init() { transport.Register(Scheme, &URLOpener{}) }

// URLOpener opens kafka:// URLs. It is registered for [Scheme] by this
// package's init, so a blank import is enough:
//
//	import _ "github.com/ferrymq/ferry/transport/kafka"
//	t, err := transport.Open(ctx, "kafka://broker1:9092,broker2:9092?group=inventory")
//
// The URL's host is a comma-separated list of brokers. User info, if any,
// is the SASL user and password. Every query key maps to one [Option]:
//
//	group             [Group]              the default consumer group
//	client_id         [ClientID]           client.id (default "ferry")
//	version           [Version]            protocol version (default 3.6.0)
//	partitioner       [Partitioner]        murmur2 (default) or fnv1a
//	compression       [Compression]        none (default), gzip, snappy, lz4, zstd
//	linger            [Linger]             a Go duration (default 0)
//	delivery_timeout  [DeliveryTimeout]    a Go duration (default 30s)
//	max_payload       [MaxPayload]         bytes (default 1000000)
//	start             [StartAt]            earliest or latest (default)
//	balance           [Assignment]         range (default), roundrobin, sticky, cooperative-sticky
//	window            [PartitionWindow]    records per partition (default MaxInFlight)
//	revoke_timeout    [RevokeTimeout]      a Go duration (default 10s)
//	session_timeout   [SessionTimeout]     a Go duration (default 10s)
//	heartbeat         [Heartbeat]          a Go duration (default 1s)
//	commit_interval   [CommitInterval]     a Go duration (default 1s)
//	sasl              [SASL]               plain, scram-sha-256 or scram-sha-512
//	tls               [TLS]                true to enable TLS with system roots
//	tls_ca            [TLS]                PEM file of CA certificates (implies tls)
//	tls_cert, tls_key [TLS]                PEM files of a client certificate (imply tls)
//	tls_insecure      [TLS]                true skips server certificate checks (tests only)
//
// An unknown key is an error that names it. The password never appears in
// errors.
type URLOpener struct {
	// Options are applied before the URL's, which win.
	Options []Option
}

var urlKeys = []string{
	"group", "client_id", "version", "partitioner", "compression", "linger", "delivery_timeout",
	"max_payload", "start", "balance", "window", "revoke_timeout", "session_timeout", "heartbeat",
	"commit_interval", "sasl", "tls", "tls_ca", "tls_cert", "tls_key", "tls_insecure",
}

// OpenURL opens a Transport from u.
func (o *URLOpener) OpenURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	brokers, opts, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	return New(ctx, brokers, append(append([]Option(nil), o.Options...), opts...)...)
}

func parseURL(u *url.URL) ([]string, []Option, error) {
	bad := func(format string, args ...any) ([]string, []Option, error) {
		return nil, nil, fmt.Errorf("%w: kafka: "+format, append([]any{transport.ErrInvalidOption}, args...)...)
	}
	var brokers []string
	for _, b := range strings.Split(u.Host, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return bad("URL names no broker")
	}
	q := map[string]string{}
	for k, vs := range u.Query() {
		if len(vs) != 1 {
			return bad("query key %q given %d times", k, len(vs))
		}
		q[k] = vs[0]
	}
	if err := transport.UnknownKeys(Scheme, q, urlKeys...); err != nil {
		return nil, nil, err
	}
	var opts []Option
	dur := func(k string, f func(time.Duration) Option) error {
		if v, ok := q[k]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: kafka: %s=%q is not a duration", transport.ErrInvalidOption, k, v)
			}
			opts = append(opts, f(d))
		}
		return nil
	}
	num := func(k string, f func(int) Option) error {
		if v, ok := q[k]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%w: kafka: %s=%q is not a number", transport.ErrInvalidOption, k, v)
			}
			opts = append(opts, f(n))
		}
		return nil
	}
	for _, err := range []error{
		dur("linger", Linger), dur("delivery_timeout", DeliveryTimeout), dur("revoke_timeout", RevokeTimeout),
		dur("session_timeout", SessionTimeout), dur("heartbeat", Heartbeat), dur("commit_interval", CommitInterval),
		num("max_payload", MaxPayload), num("window", PartitionWindow),
	} {
		if err != nil {
			return nil, nil, err
		}
	}
	if v, ok := q["group"]; ok {
		opts = append(opts, Group(v))
	}
	if v, ok := q["client_id"]; ok {
		opts = append(opts, ClientID(v))
	}
	if v, ok := q["version"]; ok {
		opts = append(opts, Version(v))
	}
	if v, ok := q["partitioner"]; ok {
		opts = append(opts, Partitioner(Partitioning(v)))
	}
	if v, ok := q["compression"]; ok {
		opts = append(opts, Compression(v))
	}
	if v, ok := q["start"]; ok {
		opts = append(opts, StartAt(Position(v)))
	}
	if v, ok := q["balance"]; ok {
		opts = append(opts, Assignment(Balance(v)))
	}

	// SASL from the user info.
	mech := SASLMechanism(strings.ToUpper(q["sasl"]))
	if u.User != nil {
		pass, _ := u.User.Password()
		if mech == saslNone {
			mech = SASLPlain
		}
		opts = append(opts, SASL(mech, u.User.Username(), pass))
	} else if mech != saslNone {
		return bad("sasl=%s needs a user and password in the URL", q["sasl"])
	}

	// TLS.
	useTLS := false
	if v, ok := q["tls"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("tls=%q is not a boolean", v)
		}
		useTLS = b
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if v, ok := q["tls_insecure"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("tls_insecure=%q is not a boolean", v)
		}
		tc.InsecureSkipVerify = b //nolint:gosec // opt-in, documented as for tests only
		useTLS = useTLS || b
	}
	if path, ok := q["tls_ca"]; ok {
		pem, err := os.ReadFile(path)
		if err != nil {
			return bad("tls_ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return bad("tls_ca %s holds no PEM certificate", path)
		}
		tc.RootCAs = pool
		useTLS = true
	}
	cert, hasCert := q["tls_cert"]
	key, hasKey := q["tls_key"]
	if hasCert != hasKey {
		return bad("tls_cert and tls_key go together")
	}
	if hasCert {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return bad("tls_cert/tls_key: %v", err)
		}
		tc.Certificates = []tls.Certificate{pair}
		useTLS = true
	}
	if useTLS {
		opts = append(opts, TLS(tc))
	}
	return brokers, opts, nil
}
