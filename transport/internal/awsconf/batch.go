package awsconf

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/ferrymq/ferry/transport"
)

// EntryError is the error for one message of a batch publish (an SQS
// SendMessageBatch or an SNS PublishBatch) that the service refused.
// Nothing was written for it. Packages sqs and sns export it as
// sqs.EntryError and sns.EntryError.
type EntryError struct {
	Service     string // "sqs" or "sns"
	Queue       string // the queue (or topic) it was for
	Code        string // the service's error code
	Message     string // the service's error message
	SenderFault bool   // true: the request was wrong; false: a retry may succeed
}

// Error describes the refusal.
func (e *EntryError) Error() string {
	svc := e.Service
	if svc == "" {
		svc = "aws"
	}
	return fmt.Sprintf("%s: publish to %s refused: %s: %s", svc, e.Queue, e.Code, e.Message)
}

// Is reports whether the refusal matches target: [transport.ErrTooLarge]
// when the service refused the message for its size (SQS's
// InvalidParameterValue "Message must be shorter than …", SNS's "Message
// too long"), so that errors.Is finds it as it does for a message refused
// before sending.
func (e *EntryError) Is(target error) bool {
	return target == transport.ErrTooLarge && TooLarge(e.Code, e.Message)
}

// Refusal is one entry a batch answer lists as failed, in the fields both
// services' BatchResultErrorEntry have.
type Refusal struct {
	ID, Code, Message *string
	SenderFault       bool
}

// Answer is a batch publish's answer: the Ids of the entries it accepted
// and the entries it refused.
type Answer struct {
	Accepted []*string
	Refused  []Refusal
}

// AnswerOf gathers a batch answer from the service's own result types:
// id gives an accepted entry's Id, refusal a refused entry's fields.
func AnswerOf[A, R any](accepted []A, id func(A) *string, refused []R, refusal func(R) Refusal) Answer {
	a := Answer{Accepted: make([]*string, len(accepted)), Refused: make([]Refusal, len(refused))}
	for i, e := range accepted {
		a.Accepted[i] = id(e)
	}
	for i, e := range refused {
		a.Refused[i] = refusal(e)
	}
	return a
}

// PublishBatch makes one batch publish of n messages to dest through call
// and returns each message's result, in order. call sends the entries with
// the Ids "0" to "n-1" (see [EntryID]) and returns the service's answer.
//
// A message the answer accepts gets nil; one it refuses, an *[EntryError];
// one it does not mention, an error wrapping [transport.ErrUnknownOutcome].
// When the call itself fails, every message gets the call's error as
// [Classify] words it, except when the service refused the whole batch for
// its size with more than one message in it: nothing was written, and each
// message is sent alone through alone(i), so that only a message too large
// by itself is refused as such. service is "sqs" or "sns".
func PublishBatch(ctx context.Context, service, dest string, n int,
	call func(ctx context.Context) (Answer, error), alone func(ctx context.Context, i int) error) []error {
	errs := make([]error, n)
	out, err := call(ctx)
	if err != nil {
		err = Classify(service, "publish to "+dest, err)
		if n > 1 && errors.Is(err, transport.ErrTooLarge) {
			for i := range errs {
				errs[i] = alone(ctx, i)
			}
			return errs
		}
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	seen := make([]bool, n)
	entry := func(id *string) (int, bool) {
		if id == nil {
			return 0, false
		}
		i, err := strconv.Atoi(*id)
		return i, err == nil && i >= 0 && i < n
	}
	for _, id := range out.Accepted {
		if i, ok := entry(id); ok {
			seen[i] = true
		}
	}
	for _, f := range out.Refused {
		if i, ok := entry(f.ID); ok {
			seen[i] = true
			errs[i] = &EntryError{Service: service, Queue: dest, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	for i, ok := range seen {
		if !ok {
			errs[i] = fmt.Errorf("%s: publish to %s: %w: entry missing from the response", service, dest, transport.ErrUnknownOutcome)
		}
	}
	return errs
}

// EntryID is the Id of the i-th entry of a batch [PublishBatch] maps.
func EntryID(i int) *string {
	s := strconv.Itoa(i)
	return &s
}
