package awsconf

import (
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/transport"
)

// Classify wraps a failed publish call: a client fault the service answered
// (bad parameter, missing queue, access denied) means nothing was written;
// anything else (no answer within the call timeout, a lost connection, a
// server fault) may have written the message and wraps
// transport.ErrUnknownOutcome. prefix is "sqs" or "sns"; op names the
// operation and its queue or topic.
func Classify(prefix, op string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient {
		return fmt.Errorf("%s: %s: %w", prefix, op, err)
	}
	return fmt.Errorf("%s: %s: %w: %w", prefix, op, transport.ErrUnknownOutcome, err)
}
