package awsconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferrymq/ferry/transport"
)

// Load returns the aws.Config that the transport's SQS and SNS clients use:
// c.AWS if given, else the standard chain (config.LoadDefaultConfig with
// Region and Profile); then Region and Endpoint override it, its HTTP client
// is wrapped with [BufferedBodyClient], and every operation gets the
// deadline [Config.CallTimeout] ([WithCallDeadline]). ctx bounds loading the
// shared configuration files only: nothing here calls AWS.
func (c *Config) Load(ctx context.Context) (aws.Config, error) {
	if c.loaded {
		return *c.AWS, nil
	}
	var cfg aws.Config
	if c.AWS != nil {
		cfg = c.AWS.Copy()
	} else {
		var lo []func(*config.LoadOptions) error
		if c.Region != "" {
			lo = append(lo, config.WithRegion(c.Region))
		}
		if c.Profile != "" {
			lo = append(lo, config.WithSharedConfigProfile(c.Profile))
		}
		var err error
		if cfg, err = config.LoadDefaultConfig(ctx, lo...); err != nil {
			// The error names files and profiles, never secrets.
			return aws.Config{}, fmt.Errorf("%w: %s: load the AWS configuration: %w", transport.ErrInvalidOption, c.Scheme, err)
		}
	}
	if c.Region != "" {
		cfg.Region = c.Region
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("%w: %s: no AWS region: set region= in the URL, Region, or AWS_REGION", transport.ErrInvalidOption, c.Scheme)
	}
	if c.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(c.Endpoint)
	}
	inner := cfg.HTTPClient
	if inner == nil {
		inner = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64
		})
	}
	cfg.HTTPClient = BufferedBodyClient(inner)
	cfg.APIOptions = append(cfg.APIOptions[:len(cfg.APIOptions):len(cfg.APIOptions)], WithCallDeadline(c.CallTimeout, cfg))
	return cfg, nil
}

// BufferedBodyClient wraps c so that each request's body is read into a
// buffer of the HTTP client's own before it is sent; see sqs.BufferedBodyClient.
func BufferedBodyClient(c aws.HTTPClient) aws.HTTPClient {
	if _, ok := c.(bufferedBodyClient); ok {
		return c
	}
	return bufferedBodyClient{c}
}

type bufferedBodyClient struct{ inner aws.HTTPClient }

func (c bufferedBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.inner.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.inner.Do(r)
}

// deadlineID names the deadline middleware in an operation's stack.
const deadlineID = "ferry/CallDeadline"

// WithCallDeadline returns an API option that gives every operation of a
// client made from cfg a deadline of d, retries and their backoff included;
// a ReceiveMessage gets its WaitTimeSeconds on top. The caller's ctx still
// ends it sooner. When the deadline (not the caller's ctx) ends an
// operation, the error names the service, the operation and the host, and
// wraps context.DeadlineExceeded. Adding it to a stack that has it already
// does nothing. A call refused for its credentials or permissions wraps
// [ErrAuth].
func WithCallDeadline(d time.Duration, cfg aws.Config) func(*middleware.Stack) error {
	fallback := ""
	if cfg.BaseEndpoint != nil {
		if u, err := url.Parse(*cfg.BaseEndpoint); err == nil {
			fallback = u.Host
		}
	}
	region := cfg.Region
	return func(s *middleware.Stack) error {
		if _, ok := s.Initialize.Get(deadlineID); ok {
			return nil
		}
		m := callDeadline{d: d, fallback: fallback, region: region}
		if err := s.Initialize.Add(m, middleware.After); err != nil {
			return err
		}
		return s.Deserialize.Add(recordHost{}, middleware.After)
	}
}

type callDeadline struct {
	d        time.Duration
	fallback string // the endpoint's host, if configured
	region   string
}

func (callDeadline) ID() string { return deadlineID }

func (m callDeadline) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	d := m.d
	if r, ok := in.Parameters.(*awssqs.ReceiveMessageInput); ok && r.WaitTimeSeconds > 0 {
		d += time.Duration(r.WaitTimeSeconds) * time.Second
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	h := new(string)
	out, md, err := next.HandleInitialize(context.WithValue(tctx, hostKey{}, h), in)
	err = authError(err)
	if err != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
		svc, op := middleware.GetServiceID(ctx), middleware.GetOperationName(ctx)
		host := *h
		if host == "" {
			host = m.fallback
		}
		if host == "" {
			host = strings.ToLower(svc) + "." + m.region + ".amazonaws.com"
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%s %s: no answer from %s within %s: %w", svc, op, host, d, err)
		} else {
			err = fmt.Errorf("%s %s: no answer from %s within %s: %w: %w", svc, op, host, d, context.DeadlineExceeded, err)
		}
	}
	return out, md, err
}

type hostKey struct{}

// recordHost notes the host each attempt is sent to, for the deadline's
// error.
type recordHost struct{}

func (recordHost) ID() string { return "ferry/RecordHost" }

func (recordHost) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	if h, ok := ctx.Value(hostKey{}).(*string); ok {
		if req, ok := in.Request.(*smithyhttp.Request); ok && req.URL != nil {
			*h = req.URL.Host
		}
	}
	return next.HandleDeserialize(ctx, in)
}

// CheckPlaintext refuses a client whose endpoint is plain http:// while
// it signs its requests with credentials, unless [Config.PlaintextAuth]
// allows it: every request then carries the access key ID, its signature
// (which can be replayed for minutes) and any session token in clear, and
// its reply the messages. endpoint is the client's resolved BaseEndpoint
// (from the URL's endpoint=, [Endpoint], WithConfig's BaseEndpoint or the
// SDK's AWS_ENDPOINT_URL variables); nil is the service's own https
// endpoint. Anonymous credentials (aws.AnonymousCredentials) sign
// nothing and pass. The error names the endpoint's host only.
func (c *Config) CheckPlaintext(cfg aws.Config, endpoint *string) error {
	if c.PlaintextAuth || endpoint == nil || cfg.Credentials == nil ||
		aws.IsCredentialsProvider(cfg.Credentials, aws.AnonymousCredentials{}) {
		return nil
	}
	u, err := url.Parse(*endpoint)
	if err != nil || !strings.EqualFold(u.Scheme, "http") {
		return nil
	}
	return fmt.Errorf("%w: %s: the endpoint http://%s has no TLS: every request would carry the AWS access key ID, its signature and any session token in clear; use an https endpoint, or set %s=true (AllowPlaintextAuth) for an emulator on this host or a trusted network",
		transport.ErrInvalidOption, c.Scheme, u.Host, KeyPlaintextAuth)
}
