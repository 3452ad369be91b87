package sns_test

import (
	"errors"

	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ferrymq/ferry/transport"
)

type sqstypesName = sqstypes.QueueAttributeName

func isTooLarge(err error) bool {
	return errors.Is(err, transport.ErrTooLarge) && !errors.Is(err, transport.ErrUnknownOutcome)
}
