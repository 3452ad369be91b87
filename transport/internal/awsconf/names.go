package awsconf

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// FIFOSuffix ends the name of every FIFO queue and FIFO topic.
const FIFOSuffix = ".fifo"

// maxQueueName is SQS's (and SNS's) limit on a name, suffix included.
const maxQueueName = 80

// DLQSuffix is added to a queue's name (before ".fifo") to name its DLQ.
const DLQSuffix = "-dlq"

// IsFIFO reports whether name is a FIFO queue's or topic's.
func IsFIFO(name string) bool { return strings.HasSuffix(name, FIFOSuffix) }

// ValidQueueName reports whether SQS accepts name: 1 to 80 letters, digits,
// hyphens and underscores, the last five ".fifo" for a FIFO queue.
func ValidQueueName(name string) bool {
	if name == "" || len(name) > maxQueueName {
		return false
	}
	base := strings.TrimSuffix(name, FIFOSuffix)
	if base == "" {
		return false
	}
	for i := 0; i < len(base); i++ {
		if !nameByte(base[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// QueueName makes a valid queue name of base: characters SQS refuses
// become '-', a name too long is cut and ended with a hash of base (so two
// long names stay apart), and ".fifo" is added when fifo is set.
func QueueName(base string, fifo bool) string {
	b := []byte(base)
	for i, c := range b {
		if !nameByte(c) {
			b[i] = '-'
		}
	}
	limit := maxQueueName
	if fifo {
		limit -= len(FIFOSuffix)
	}
	if len(b) > limit {
		sum := sha256.Sum256([]byte(base))
		b = append(b[:limit-9], '-')
		b = append(b, hex.EncodeToString(sum[:4])...)
	}
	if fifo {
		return string(b) + FIFOSuffix
	}
	return string(b)
}

// DLQName is the default DLQ of queue: "<queue>-dlq", or
// "<queue-less-.fifo>-dlq.fifo" for a FIFO queue, whose DLQ must be FIFO
// too; fitted to 80 characters by [QueueName].
func DLQName(queue string) string {
	fifo := IsFIFO(queue)
	return QueueName(strings.TrimSuffix(queue, FIFOSuffix)+DLQSuffix, fifo)
}
