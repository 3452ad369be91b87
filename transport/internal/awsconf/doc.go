// Package awsconf is the configuration that the sqs and sns transports
// share, so that it has one owner: the [Option]s and their validation, the
// URL and Subscription.Options keys ([Parse], [Config.ParseSub]), loading
// the AWS configuration with the buffered-body HTTP client and a deadline on
// every call ([Config.Load]), and the naming of queues and DLQs
// ([QueueName], [DLQName]).
//
// Package sqs exports every Option under its own name (sqs.Region, …), and
// package sns takes the same sqs.Option values: an sns:// URL has exactly
// the keys of an sqs:// URL.
package awsconf
