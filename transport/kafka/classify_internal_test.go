package kafka

import (
	"errors"
	"testing"

	"github.com/IBM/sarama"

	"github.com/ferrymq/ferry/transport"
)

// TestClassify (issue 17, item 2): sarama's local refusals were never
// sent, so they are not unknown outcomes: its "larger than
// Producer.MaxMessageBytes" is ErrTooLarge, and a broker's
// MESSAGE_TOO_LARGE too; a timeout or a lost connection stays unknown.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name             string
		err              error
		tooLarge, unknwn bool
	}{
		{"sarama MaxMessageBytes", sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes: 1048600 > 1048576"), true, false},
		{"sarama other configuration", sarama.ConfigurationError("Producing headers requires Kafka at least v0.11"), false, false},
		{"broker too large", sarama.ErrMessageSizeTooLarge, true, false},
		{"broker invalid record", sarama.ErrInvalidRecord, false, false},
		{"timeout", sarama.ErrRequestTimedOut, false, true},
		{"connection", errors.New("write: broken pipe"), false, true},
	} {
		err := classify("t", c.err)
		if errors.Is(err, transport.ErrTooLarge) != c.tooLarge || errors.Is(err, transport.ErrUnknownOutcome) != c.unknwn || !errors.Is(err, c.err) {
			t.Errorf("%s: classify = %v; want ErrTooLarge %v, ErrUnknownOutcome %v, wrapping the cause", c.name, err, c.tooLarge, c.unknwn)
		}
	}
}
