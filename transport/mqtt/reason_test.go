package mqtt_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrymq/ferry/transport"
	"github.com/ferrymq/ferry/transport/mqtt"
)

// TestReasonErrors: each MQTT 5 reason code a caller may act on matches
// its sentinel with errors.Is, keeps its code for errors.As, and names its
// meaning; a code without a sentinel matches none of them.
func TestReasonErrors(t *testing.T) {
	sentinels := []error{mqtt.ErrBadCredentials, mqtt.ErrNotAuthorized, mqtt.ErrQuotaExceeded, mqtt.ErrPayloadFormatInvalid,
		mqtt.ErrPacketTooLarge, mqtt.ErrTopicNameInvalid, mqtt.ErrServerUnavailable}
	for code, c := range map[byte]struct {
		want error
		text string
	}{
		0x86: {mqtt.ErrBadCredentials, "bad user name or password"},
		0x87: {mqtt.ErrNotAuthorized, "not authorized"},
		0x97: {mqtt.ErrQuotaExceeded, "quota exceeded"},
		0x99: {mqtt.ErrPayloadFormatInvalid, "payload format invalid"},
		0x95: {mqtt.ErrPacketTooLarge, "packet too large"},
		0x90: {mqtt.ErrTopicNameInvalid, "topic name invalid"},
		0x89: {mqtt.ErrServerUnavailable, "server busy"},
		0x80: {nil, "unspecified error"},
		0x8E: {nil, "session taken over"},
	} {
		var err error = &mqtt.ReasonError{Code: code, Packet: "PUBACK", Reason: "from the broker"}
		wrapped := errors.Join(errors.New("context"), err)
		for _, s := range sentinels {
			if got := errors.Is(wrapped, s); got != (s == c.want) {
				t.Errorf("0x%02X: errors.Is(err, %v) = %v", code, s, got)
			}
		}
		var re *mqtt.ReasonError
		if !errors.As(wrapped, &re) || re.Code != code {
			t.Errorf("0x%02X: errors.As gives %v", code, re)
		}
		if msg := err.Error(); !strings.Contains(msg, c.text) || !strings.Contains(msg, "PUBACK") || !strings.Contains(msg, "from the broker") {
			t.Errorf("0x%02X: %q does not name the packet, the meaning (%s) and the reason string", code, msg, c.text)
		}
	}
	if !errors.Is(&mqtt.ReasonError{Code: 0x95}, transport.ErrTooLarge) {
		t.Error("packet too large does not wrap transport.ErrTooLarge")
	}
}
