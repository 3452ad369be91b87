package sqs_test

import (
	"context"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymq/ferry/transport/sqs"
)

func deleteQueue(tb testing.TB, tr *sqs.Transport, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = tr.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: &url})
}
