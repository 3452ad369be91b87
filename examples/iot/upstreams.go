package main

// The upstream transports the example can forward to by URL, besides the
// in-memory default: redis://host:6379 (Redis Streams) and
// kafka://host:9092.
import (
	_ "github.com/ferrymq/ferry/transport/kafka"
	_ "github.com/ferrymq/ferry/transport/redisstream"
)
