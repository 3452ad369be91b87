package sqs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/internal/awsconf"
)

// ErrAuth is wrapped by the error of any call that AWS refused for its
// credentials or permissions (an unknown or expired access key, a bad
// signature, access denied), from this transport, package sns and the
// clients of [Transport.Client]. Nothing was written.
var ErrAuth = awsconf.ErrAuth

// EntryError is the error for one message of a SendMessageBatch (or an SNS
// PublishBatch) that the service refused. Nothing was written for it. Its
// Is matches [transport.ErrTooLarge] when the service refused the message
// for its size (SQS's InvalidParameterValue "Message must be shorter than
// …", SNS's "Message too long"), as for a message refused before sending.
// Package sns reports the same type.
type EntryError = awsconf.EntryError

// invalid returns an error wrapping transport.ErrInvalidOption.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: sqs: %s", transport.ErrInvalidOption, fmt.Sprintf(format, args...))
}

func isCode(err error, codes ...string) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.ErrorCode() == c {
			return true
		}
	}
	return false
}

// isGone reports whether err says the queue does not exist.
func isGone(err error) bool {
	var nf *types.QueueDoesNotExist
	return errors.As(err, &nf) || isCode(err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
}

// isNotInFlight reports whether err says a receipt handle no longer holds
// its message: the lease ended and the message was received again (or
// deleted).
func isNotInFlight(err error) bool {
	var rh *types.ReceiptHandleIsInvalid
	var nf *types.MessageNotInflight
	if errors.As(err, &rh) || errors.As(err, &nf) || isCode(err, "ReceiptHandleIsInvalid", "MessageNotInflight",
		"AWS.SimpleQueueService.MessageNotInflight") {
		return true
	}
	// AWS answers an expired handle with InvalidParameterValue, "Value …
	// for parameter ReceiptHandle is invalid. Reason: The receipt handle
	// has expired."
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "InvalidParameterValue" && strings.Contains(ae.ErrorMessage(), "ReceiptHandle")
}
