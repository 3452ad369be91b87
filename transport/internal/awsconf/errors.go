package awsconf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/transport"
)

// ErrAuth is wrapped by the error of any call that AWS refused for its
// credentials or permissions: an unknown or expired access key, a bad
// signature, access denied. Package sqs exports it as sqs.ErrAuth.
var ErrAuth = fmt.Errorf("aws: credentials or permissions refused: %w", transport.ErrAuth)

// authCodes are the error codes of SQS's and SNS's refusals for
// credentials or permissions (AWS's common errors).
var authCodes = map[string]bool{
	"InvalidClientTokenId": true, "UnrecognizedClientException": true, "SignatureDoesNotMatch": true,
	"IncompleteSignature": true, "MissingAuthenticationToken": true, "InvalidAccessKeyId": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "InvalidSecurity": true, "AuthFailure": true,
	"AccessDenied": true, "AccessDeniedException": true, "AuthorizationError": true,
}

// authError wraps err with ErrAuth when AWS refused the call for its
// credentials or permissions.
func authError(err error) error {
	var ae smithy.APIError
	if err != nil && errors.As(err, &ae) && authCodes[ae.ErrorCode()] && !errors.Is(err, ErrAuth) {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return err
}

// Classify wraps a failed publish call: a client fault the service answered
// (bad parameter, missing queue, access denied) means nothing was written;
// anything else (no answer within the call timeout, a lost connection, a
// server fault) may have written the message and wraps
// transport.ErrUnknownOutcome. A refusal for size ([TooLarge]) also wraps
// transport.ErrTooLarge, so that the dead-letter middleware cuts a dead
// letter to fit instead of handing its message back for ever. prefix is
// "sqs" or "sns"; op names the operation and its queue or topic.
func Classify(prefix, op string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient {
		if TooLarge(ae.ErrorCode(), ae.ErrorMessage()) {
			return fmt.Errorf("%s: %s: %w: %w", prefix, op, transport.ErrTooLarge, err)
		}
		return fmt.Errorf("%s: %s: %w", prefix, op, err)
	}
	return fmt.Errorf("%s: %s: %w: %w", prefix, op, transport.ErrUnknownOutcome, err)
}

// TooLarge reports whether a refusal by SQS or SNS, given by its error
// code and message (of a call or of one batch entry), says that the
// message, or the batch, is over the size limit. SQS answers
// InvalidParameterValue "… Message must be shorter than N bytes." for a
// message and BatchRequestTooLong for a batch; SNS answers
// InvalidParameter "… Message too long …".
func TooLarge(code, message string) bool {
	switch code {
	case "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", "MessageTooLong", "RequestEntityTooLarge":
		return true
	case "InvalidParameterValue", "InvalidParameter", "ValidationError":
		m := strings.ToLower(message)
		return strings.Contains(m, "message must be shorter than") || strings.Contains(m, "message too long")
	}
	return false
}
