package awsconf

import (
	"testing"
)

// TestDefaultCallTimeout: a URL that sets no call_timeout, with no
// option, keeps the default deadline of DefaultCallTimeout (30s), which
// Load installs on every call: no network call of an sqs or sns transport
// is without one.
func TestDefaultCallTimeout(t *testing.T) {
	for _, scheme := range []string{"sqs", "sns"} {
		c, err := Parse(scheme, scheme+"://?region=eu-west-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.CallTimeout != DefaultCallTimeout || DefaultCallTimeout <= 0 {
			t.Errorf("%s: CallTimeout %s, want the default %s", scheme, c.CallTimeout, DefaultCallTimeout)
		}
		if c.PlaintextAuth {
			t.Errorf("%s: PlaintextAuth is on by default", scheme)
		}
	}
}
