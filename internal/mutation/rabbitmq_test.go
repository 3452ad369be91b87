package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// The RabbitMQ transport's mutants (issues 17, 18 and 21): each bug is
// killed by a named test of transport/rabbitmq, against the shared
// RabbitMQ (the stall tests go through a proxy of their own). RabbitMQ
// acks by delivery tag, so "commit past unfinished work" takes the form of
// a multiple ack covering deliveries still being handled (ack-all).
const (
	rabbitPkg = "./transport/rabbitmq"
	// rabbitSuite: the conformance cases of the default URL that count
	// acks, headers and attempts.
	rabbitSuite = "^TestConformance$/^(Ack|Headers|Attempts)$"
)

func rabbitUp(tb testing.TB) {
	transporttest.RequireBroker(tb, "rabbitmq", "amqp://guest:guest@127.0.0.1:5672/")
}

func init() {
	register("rabbitmq", []Mutant{
		{
			Name: "ack-all", // one multiple ack covers every delivery up to the highest acked tag, unsettled ones too
			Pkg:  rabbitPkg, File: "transport/rabbitmq/acker.go",
			Find:     "\tprefix := a.floor - 1 // every tag up to it is settled, or acked now\n",
			Replace:  "\tprefix := ^uint64(0)\n",
			Run:      rabbitSuite,
			Want:     "not redelivered to the next consumer",
			Requires: rabbitUp,
		},
		{
			Name: "dropped-headers", // the headers table never reaches Message.Headers
			Pkg:  rabbitPkg, File: "transport/rabbitmq/headers.go",
			Find:     "\t\tput(k, headerString(v))\n",
			Replace:  "\t\t_ = v\n",
			Run:      rabbitSuite,
			Want:     "Headers = ",
			Requires: rabbitUp,
		},
		{
			Name: "attempt-count-without-redeliveries", // the broker's delivery count is left out of the attempt
			Pkg:  rabbitPkg, File: "transport/rabbitmq/headers.go",
			Find:     "\treturn int(prior + count + 1)\n",
			Replace:  "\treturn int(prior + 1 + 0*count)\n",
			Run:      "^TestForgedDeliveryCountClassic$",
			Want:     "delivery 2: attempt 1, want 2",
			Requires: rabbitUp,
		},
		{
			Name: "frame-max-unchecked", // a header over frame_max is written: RabbitMQ closes the connection
			Pkg:  rabbitPkg, File: "transport/rabbitmq/publish.go",
			Find:     "checkFrame(&pub, pc.sess.conn.Config.FrameSize, reserve)",
			Replace:  "checkFrame(&pub, 0, reserve)",
			Run:      "^TestHeaderOverFrameMax$",
			Want:     "want ErrInvalidMessage naming header",
			Requires: rabbitUp,
		},
		{
			Name: "no-publish-reserve", // a message may fill frame_max: what the broker adds on the way to the DLQ makes it unreadable
			Pkg:  rabbitPkg, File: "transport/rabbitmq/frame.go",
			Find:     "\tpublishReserve = 8 << 10\n",
			Replace:  "\tpublishReserve = 0\n",
			Run:      "^TestNearFrameMaxDeadLetter$",
			Want:     "waiting for the message in the DLQ",
			Requires: rabbitUp,
		},
		{
			Name: "forged-prior-attempts-trusted", // x-ferry-prior-attempts read from any message
			Pkg:  rabbitPkg, File: "transport/rabbitmq/headers.go",
			Find:     "\tif viaRetry(d, queue) {\n",
			Replace:  "\tif true {\n",
			Run:      "^TestForgedAttemptHeaders$",
			Want:     "forged: handler ran on attempts",
			Requires: rabbitUp,
		},
		{
			Name: "forged-delivery-count-trusted-on-classic", // x-delivery-count read on a classic queue, which never sets it
			Pkg:  rabbitPkg, File: "transport/rabbitmq/headers.go",
			Find:     "\t\tif queueType == QueueQuorum {\n",
			Replace:  "\t\tif true {\n",
			Run:      "^TestForgedDeliveryCountClassic$",
			Want:     "want 2",
			Requires: rabbitUp,
		},
		{
			Name: "attempt-headers-published", // Publish lets x-delivery-count and x-ferry-* through
			Pkg:  rabbitPkg, File: "transport/rabbitmq/headers.go",
			Find:     "\t\tcase isAttemptHeader(k):\n",
			Replace:  "\t\tcase false:\n",
			Run:      "^TestForgedAttemptHeaders$",
			Want:     "want ErrInvalidMessage naming it",
			Requires: rabbitUp,
		},
		{
			Name: "plaintext-credentials-allowed", // a password over amqp:// without the opt-in
			Pkg:  rabbitPkg, File: "transport/rabbitmq/url.go",
			Find:     "\tif !ep.tls && !cfg.plaintextAuth && ",
			Replace:  "\tif false && !cfg.plaintextAuth && ",
			Run:      "^TestPlaintextAuth$",
			Want:     "want ErrInvalidOption",
			Requires: rabbitUp,
		},
		{
			Name: "no-call-deadline", // a synchronous AMQP call waits for a silent broker forever
			Pkg:  rabbitPkg, File: "transport/rabbitmq/conn.go",
			Find:     "\tg.timer = time.AfterFunc(c.timeout, func() {\n",
			Replace:  "\tg.timer = time.AfterFunc(time.Hour, func() {\n",
			Run:      "^TestStalledBroker$",
			Want:     "Subscribe had not returned after 8s",
			Requires: rabbitUp,
		},
		{
			Name: "no-confirm-deadline", // Publish with a context without deadline waits for a confirm forever
			Pkg:  rabbitPkg, File: "transport/rabbitmq/publish.go",
			Find:     "\tif _, ok := ctx.Deadline(); !ok {\n",
			Replace:  "\tif _, ok := ctx.Deadline(); false && !ok {\n",
			Run:      "^TestStalledBroker$",
			Want:     "Publish had not returned after 8s",
			Requires: rabbitUp,
		},
		{
			Name: "flush-early", // Flush returns before the callbacks of the messages accepted before it
			Pkg:  rabbitPkg, File: "transport/rabbitmq/async.go",
			Find:     "\ta.mu.Lock()\n\tif a.completed >= a.accepted {\n",
			Replace:  "\ta.mu.Lock()\n\tif true {\n",
			Run:      "^TestPublishAsync$",
			Want:     "callbacks after Flush",
			Requires: rabbitUp,
		},
	})
}
