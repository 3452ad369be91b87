package mutation

// The SQS transport's mutants (issues 17 and 18), each with the test that
// kills it. Their tests run on fauxqs (internal/fauxqs), which the
// children start themselves; under FERRY_REQUIRE_BROKERS=1 a child without
// it fails, so the control fails loudly rather than a mutant passing.
func init() {
	register("sqs", []Mutant{
		{
			Name: "ack-at-receive", // a message is deleted as it is received, before the handler
			Pkg:  "./transport/sqs", File: "transport/sqs/receive.go",
			Find: `		for _, d := range batch {
			s.deliveries <- d // never blocks: a token was taken for it
		}`,
			Replace: `		for _, d := range batch {
			_ = s.acks.Submit(context.Background(), d.handle, nil)
			s.deliveries <- d // never blocks: a token was taken for it
		}`,
			Run:  "^TestConformance$/^Ack$",
			Want: "not redelivered to the next consumer",
		},
		{
			Name: "extend-noop", // Extend returns nil and changes no visibility
			Pkg:  "./transport/sqs", File: "transport/sqs/settle.go",
			Find: `	start := time.Now()
	_, err := d.s.t.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: &d.s.q.URL, ReceiptHandle: &d.handle, VisibilityTimeout: secs,
	})`,
			Replace: `	start := time.Now()
	var err error`,
			Run:  "^TestConformance$/^Extend$",
			Want: "Extend did not keep its lease",
		},
		{
			Name: "attempt-flat", // Facts.Attempt ignores ApproximateReceiveCount
			Pkg:  "./transport/sqs", File: "transport/sqs/receive.go",
			Find:    `	f.Attempt, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])`,
			Replace: `	f.Attempt, _ = strconv.Atoi("1")`,
			Run:     "^TestConformance$/^Attempts$",
			Want:    "want 2",
		},
		{
			Name: "drop-headers", // the reader drops headers carried as attributes
			Pkg:  "./transport/sqs", File: "transport/sqs/wire/wire.go",
			Find:    `		d.Headers[k] = a.Value`,
			Replace: `		_ = a`,
			Run:     "^TestConformance$/^Headers$",
			Want:    "Headers =",
		},
		{
			Name: "empty-id-sent", // an empty ID is published; the reader takes SQS's MessageId
			Pkg:  "./transport/sqs", File: "transport/sqs/wire/wire.go",
			Find: `	case id == "":
		return nil, fmt.Errorf("%w: Message.ID is empty: a reader would take the SQS MessageId instead, and dedupe needs an ID of the event", transport.ErrInvalidMessage)
`,
			Replace: `	case id == "":
`,
			Run:  "^TestConformance$/^InvalidMessage$",
			Want: "empty ID: accepted, but came back with ID",
		},
		{
			Name: "size-payload-only", // the size check counts the payload, not the attributes
			Pkg:  "./transport/sqs", File: "transport/sqs/publish.go",
			Find:    `	if size := enc.Size(); size > q.info.MaxSize {`,
			Replace: `	if size := len(m.Payload); size > q.info.MaxSize {`,
			Run:     "^TestTooLargeBeforeSending$",
			Want:    "want ErrTooLarge before sending",
		},
		{
			Name: "broker-too-large-unknown", // SQS's own refusal for size is not ErrTooLarge: the dead letter loops
			Pkg:  "./transport/sqs", File: "transport/sqs/publish.go",
			Find:    `	if size := enc.Size(); size > q.info.MaxSize {`,
			Replace: `	if size := len(m.Payload); size > q.info.MaxSize {`,
			More: []Edit{
				{File: "transport/internal/awsconf/batch.go", Find: `	return target == transport.ErrTooLarge && TooLarge(e.Code, e.Message)`, Replace: `	return false && TooLarge(e.Code, e.Message)`},
				{File: "transport/internal/awsconf/errors.go", Find: `		if TooLarge(ae.ErrorCode(), ae.ErrorMessage()) {`, Replace: `		if false {`},
			},
			Run:  "^TestRouterDeadLetterNearLimit$",
			Want: "want the retry budget's 3, then the dead letter",
		},
		{
			Name: "entry-refusal-as-success", // a refused entry of a SendMessageBatch is reported as sent
			Pkg:  "./transport/sqs", File: "transport/internal/awsconf/batch.go",
			Find:    `			errs[i] = &EntryError{Service: service, Queue: dest, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}`,
			Replace: `			_, _ = f, aws.ToString`,
			Run:     "^TestPublishAsync$/^standard$",
			Want:    "want the *EntryError of its refused entry",
		},
		{
			Name: "window-unbounded", // PublishAsync never waits: publish_window is ignored
			Pkg:  "./transport/sqs", File: "transport/sqs/publish.go",
			Find:    `		MaxPending: t.cfg.PublishWindow},`,
			Replace: `		MaxPending: 1 << 20},`,
			Run:     "^TestPublishAsyncWindow$",
			Want:    "want ctx's deadline error",
		},
		{
			Name: "plaintext-allowed", // signed requests go to an http:// endpoint without the opt-in
			Pkg:  "./transport/sqs", File: "transport/internal/awsconf/load.go",
			Find:    `	if c.PlaintextAuth || endpoint == nil || cfg.Credentials == nil ||`,
			Replace: `	if true || c.PlaintextAuth || endpoint == nil || cfg.Credentials == nil ||`,
			Run:     "^TestPlaintextAuth$",
			Want:    "want ErrInvalidOption naming 127.0.0.1:4566 and allow_plaintext_auth",
		},
		{
			Name: "keyless-group-hashed", // a keyless FIFO message with an odd ID gets a hashed group, read back as its Key
			Pkg:  "./transport/sqs", File: "transport/sqs/wire/wire.go",
			Find:    `		group = NoKeyGroupPrefix + hex.EncodeToString(sum[:])`,
			Replace: `		group = hex.EncodeToString(sum[:])`,
			Run:     "^TestFIFOKeylessOddID$",
			Want:    "came back with Key",
		},
		{
			Name: "auth-not-wrapped", // a call refused for its credentials is a plain error, not sqs.ErrAuth
			Pkg:  "./transport/sqs", File: "transport/internal/awsconf/load.go",
			Find:    `	err = authError(err)`,
			Replace: `	_ = authError`,
			Run:     "^TestAuthRefused$",
			Want:    "want an error wrapping sqs.ErrAuth",
		},
		{
			Name: "deadline-without-host", // a call that times out does not say which host it waited for
			Pkg:  "./transport/sqs", File: "transport/internal/awsconf/load.go",
			Find:    `			err = fmt.Errorf("%s %s: no answer from %s within %s: %w", svc, op, host, d, err)`,
			Replace: `			err = fmt.Errorf("%s %s: no answer within %s: %w", svc, op, d, err)`,
			Run:     "^TestCallTimeoutSilentServer$",
			Want:    "does not name the operation",
		},
	})
}

// The SNS transport's mutants, on the same emulator.
func init() {
	register("sns", []Mutant{
		{
			Name: "broker-too-large-unknown", // sizes counted without attributes, and SNS's own refusal for size not ErrTooLarge: the dead letter loops
			Pkg:  "./transport/sns", File: "transport/sns/publish.go",
			Find:    `	if size := enc.Size(); size > MaxMessageSize {`,
			Replace: `	if size := len(m.Payload); size > MaxMessageSize {`,
			More: []Edit{
				{File: "transport/internal/awsconf/errors.go", Find: `		if TooLarge(ae.ErrorCode(), ae.ErrorMessage()) {`, Replace: `		if false {`},
			},
			Run:  "^TestRouterDeadLetterNearLimit$",
			Want: "want the retry budget's 3, then the dead letter",
		},
		{
			Name: "window-unbounded", // PublishAsync never waits: publish_window is ignored
			Pkg:  "./transport/sns", File: "transport/sns/publish.go",
			Find:    `		MaxPending: t.cfg.PublishWindow},`,
			Replace: `		MaxPending: 1 << 20},`,
			Run:     "^TestPublishAsyncWindow$",
			Want:    "want ctx's deadline error",
		},
	})
}
