// Package rabbitmq is the RabbitMQ transport (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go), registered for amqp:// and amqps://.
package rabbitmq
