package awsconf

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

// FuzzParse: Parse of any text never panics; it fails only with an error
// wrapping transport.ErrInvalidOption, and what it accepts is within the
// documented ranges. The seeds are the URLs of the package docs and tests
// and their malformed neighbours.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"sqs://?region=eu-west-1",
		"sqs://orders?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A4566&allow_plaintext_auth=true",
		"sqs://?region=us-east-1&visibility=30s&max_extension=10m&wait=20s&pollers=4&max_in_flight=100",
		"sqs://?dlq=orders-dlq&max_receive_count=5&create=false&id_attribute=_watermill_message_uuid",
		"sqs://?number_headers=total,qty&content_dedupe=true&publish_concurrency=8&call_timeout=5s",
		"sqs://AKIA:s3cret@x?region=us-east-1", "sqs://x/path", "sqs://?region=a&region=b", "sqs://?wait=20",
		"sqs://?visibility=1500ms", "sqs://?dlq=", "sqs://?dlq=q.fifo&max_receive_count=1001", "sqs://?%zz",
		"sns://?endpoint=ftp://h", "sqs://?endpoint=http://u:p@h:1/?token=t", "sqs://?allow_plaintext_auth=maybe",
		"sqs:", "", "://", "sqs://[::1", "SQS://?REGION=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := Parse("sqs", raw, nil)
		if err != nil {
			if !errors.Is(err, transport.ErrInvalidOption) {
				t.Fatalf("Parse(%q) = %v; want an error wrapping ErrInvalidOption", raw, err)
			}
			return
		}
		s := c.Sub
		switch {
		case c.PublishCalls < 1, c.CallTimeout <= 0, s.Pollers < 1, s.MaxInFlight < 1,
			s.Wait < 0 || s.Wait > 20*time.Second || s.Wait%time.Second != 0,
			s.Visibility != 0 && (s.Visibility < time.Second || s.Visibility > 12*time.Hour || s.Visibility%time.Second != 0),
			s.MaxExtension < 0 || s.MaxExtension > 12*time.Hour,
			s.MaxReceiveCount < 0 || s.MaxReceiveCount > 1000,
			s.DLQ != "" && !ValidQueueName(s.DLQ):
			t.Fatalf("Parse(%q) accepted out-of-range settings: %+v", raw, c)
		}
		if c.Endpoint != "" {
			u, err := url.Parse(c.Endpoint)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				t.Fatalf("Parse(%q) accepted the endpoint %q", raw, c.Endpoint)
			}
		}
	})
}

// FuzzParseSecret: a secret in the URL's user-info, in the endpoint's
// user-info, or as a malformed value of a known key (a duration, the
// endpoint) never appears in the error Parse returns. (Names are echoed
// on purpose: an unknown key, a refused queue or attribute name.)
func FuzzParseSecret(f *testing.F) {
	f.Add("s3cretPassw0rd")
	f.Add("p@ss:w/rd?&=")
	f.Add("ünïcødé-secret")
	f.Fuzz(func(t *testing.T, secret string) {
		if len(secret) < 6 || strings.ContainsAny(secret, "\x00") {
			return
		}
		q := url.QueryEscape(secret)
		for _, raw := range []string{
			"sqs://admin:" + url.PathEscape(secret) + "@x?region=us-east-1",
			"sqs://?region=us-east-1&endpoint=" + url.QueryEscape("ftp://u:"+url.PathEscape(secret)+"@h"),
			"sqs://?region=us-east-1&visibility=" + q,
			"sqs://?region=us-east-1&call_timeout=" + q,
			"sqs://?region=us-east-1&endpoint=" + q,
			"sqs://?region=us-east-1&endpoint=" + url.QueryEscape("http://"+url.PathEscape(secret)+"@h/"),
		} {
			_, err := Parse("sqs", raw, nil)
			if err == nil {
				continue
			}
			text := err.Error()
			if (strings.Contains(text, secret) || strings.Contains(text, q)) && !isWordOfMessage(secret) {
				t.Fatalf("Parse(%q) = %q: the error shows the secret", raw, text)
			}
		}
	})
}

// isWordOfMessage reports whether s occurs in the fixed text of Parse's
// errors anyway, so that finding it there proves nothing.
func isWordOfMessage(s string) bool {
	_, err := Parse("sqs", "sqs://?region=us-east-1&visibility=bad&endpoint=ftp://x&call_timeout=bad", nil)
	fixed := err.Error() + " credentials in the URL are not supported: use the AWS configuration chain (environment, shared files, profile=, roles)" +
		" want an absolute http or https URL such as http://127.0.0.1:4566 want whole seconds from 1s to 12h want more than 0"
	return strings.Contains(fixed, s)
}
