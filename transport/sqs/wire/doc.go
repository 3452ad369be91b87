// Package wire is Ferry's message format on Amazon SQS and SNS: which message
// attributes carry a message's ID, Key and Headers, how headers beyond the
// ten attributes a message may have are packed, and how a payload SQS cannot
// carry as text is encoded.
//
// The sqs and sns transports use it; a producer or consumer written with
// another client can use it, or the description below, to interoperate.
//
//   - The body is the payload, byte for byte, when it is non-empty text SQS
//     accepts (UTF-8 of the characters #x9 | #xA | #xD | #x20 to #xD7FF |
//     #xE000 to #xFFFD | #x10000 to #x10FFFF). Otherwise the body is the
//     payload in standard base64 and the String attribute
//     "ferry-body-encoding" is "base64" (or the body is "-" and the attribute
//     is "empty", since SQS refuses an empty body).
//   - Message.ID is the String attribute "ferry-id" (configurable). When it is
//     absent a reader takes "_watermill_message_uuid" (watermill-aws's
//     attribute), then the caller's fallback (the SQS MessageId).
//   - Message.Key is MessageGroupId on FIFO queues and topics; elsewhere, and
//     on FIFO when the key is not a valid group ID, it is the String
//     attribute "ferry-key".
//   - Each header is a String attribute of the same name (Number when the
//     writer lists it as numeric, so that SNS numeric filter policies match
//     it), as watermill-aws writes its metadata. SQS and SNS allow ten
//     attributes per message. When a message has more, or a header cannot be
//     an attribute (an empty value, a name SQS refuses, a name Ferry
//     reserves), the headers that do not fit go into one String attribute,
//     "ferry-headers", as a JSON object. Attributes are filled in header-name
//     order, so the same headers always pack the same way. A reader merges
//     the object back into the headers; a foreign reader sees it as one
//     attribute holding JSON.
package wire
