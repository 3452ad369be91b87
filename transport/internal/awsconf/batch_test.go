package awsconf

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/ferrymq/ferry/transport"
)

func str(s string) *string { return &s }

// TestPublishBatchAnswer: each message gets its own entry's result: nil
// when accepted, an *EntryError naming the service, the queue and the
// refusal when refused (ErrTooLarge for a refusal for size), and
// ErrUnknownOutcome when the answer does not mention it. Ids the batch
// did not send are ignored.
func TestPublishBatchAnswer(t *testing.T) {
	for _, service := range []string{"sqs", "sns"} {
		errs := PublishBatch(context.Background(), service, "orders", 4, func(context.Context) (Answer, error) {
			return Answer{
				Accepted: []*string{EntryID(0), str("7"), nil, str("x")},
				Refused: []Refusal{
					{ID: EntryID(1), Code: str("InvalidParameterValue"), Message: str("Message must be shorter than 262144 bytes."), SenderFault: true},
					{ID: EntryID(2), Code: str("InternalError"), Message: str("try again")},
					{ID: str("-1"), Code: str("X")},
				},
			}, nil
		}, func(context.Context, int) error { t.Fatal("a message was sent alone"); return nil })
		if errs[0] != nil {
			t.Errorf("%s: accepted entry: %v; want nil", service, errs[0])
		}
		var ee *EntryError
		if !errors.As(errs[1], &ee) || !ee.SenderFault || !errors.Is(errs[1], transport.ErrTooLarge) ||
			errs[1].Error() != service+": publish to orders refused: InvalidParameterValue: Message must be shorter than 262144 bytes." {
			t.Errorf("%s: entry refused for size: %v; want a sender-fault *EntryError wrapping ErrTooLarge", service, errs[1])
		}
		if !errors.As(errs[2], &ee) || ee.SenderFault || errors.Is(errs[2], transport.ErrTooLarge) || ee.Code != "InternalError" {
			t.Errorf("%s: entry refused by a server fault: %v; want an *EntryError, not ErrTooLarge", service, errs[2])
		}
		if !errors.Is(errs[3], transport.ErrUnknownOutcome) || !strings.HasPrefix(errs[3].Error(), service+": publish to orders") {
			t.Errorf("%s: entry missing from the answer: %v; want ErrUnknownOutcome", service, errs[3])
		}
	}
}

// TestPublishBatchCallFailed: a call the service refused for the batch's
// size sends each message alone; any other failure is every message's
// error, as Classify words it.
func TestPublishBatchCallFailed(t *testing.T) {
	tooLong := &smithy.GenericAPIError{Code: "BatchRequestTooLong", Fault: smithy.FaultClient}
	var alone []int
	errs := PublishBatch(context.Background(), "sqs", "q", 3, func(context.Context) (Answer, error) { return Answer{}, tooLong },
		func(_ context.Context, i int) error {
			alone = append(alone, i)
			if i == 1 {
				return transport.ErrTooLarge
			}
			return nil
		})
	if len(alone) != 3 || errs[0] != nil || errs[1] != transport.ErrTooLarge || errs[2] != nil {
		t.Errorf("batch too large: sent alone %v, results %v; want 0, 1, 2 alone and only 1 refused", alone, errs)
	}

	// One message too large is its own refusal: nothing to split.
	errs = PublishBatch(context.Background(), "sqs", "q", 1, func(context.Context) (Answer, error) { return Answer{}, tooLong },
		func(context.Context, int) error { t.Fatal("a single message was sent alone again"); return nil })
	if !errors.Is(errs[0], transport.ErrTooLarge) {
		t.Errorf("single message too large: %v; want ErrTooLarge", errs[0])
	}

	lost := errors.New("connection reset")
	errs = PublishBatch(context.Background(), "sns", "t", 2, func(context.Context) (Answer, error) { return Answer{}, lost },
		func(context.Context, int) error { t.Fatal("sent alone after a lost call"); return nil })
	for i, err := range errs {
		if !errors.Is(err, transport.ErrUnknownOutcome) || !errors.Is(err, lost) || !strings.HasPrefix(err.Error(), "sns: publish to t") {
			t.Errorf("message %d after a lost call: %v; want ErrUnknownOutcome wrapping the call's error", i, err)
		}
	}
}
