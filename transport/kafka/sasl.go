package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// scramClient adapts franz-go's SCRAM implementation (RFC 5802) to the
// interface sarama asks for, so that SCRAM-SHA-256 and SCRAM-SHA-512 need
// no further dependency.
type scramClient struct {
	sha512  bool
	session sasl.Session
	first   []byte
	started bool
	done    bool
}

func (c *scramClient) Begin(user, password, authzID string) error {
	auth := scram.Auth{User: user, Pass: password, Zid: authzID}
	mech := auth.AsSha256Mechanism()
	if c.sha512 {
		mech = auth.AsSha512Mechanism()
	}
	s, first, err := mech.Authenticate(context.Background(), "")
	if err != nil {
		return err
	}
	c.session, c.first, c.started, c.done = s, first, false, false
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) {
	if !c.started {
		c.started = true
		return string(c.first), nil
	}
	if c.session == nil {
		return "", errors.New("kafka: SCRAM step before begin")
	}
	done, resp, err := c.session.Challenge([]byte(challenge))
	if err != nil {
		return "", err
	}
	c.done = done
	return string(resp), nil
}

func (c *scramClient) Done() bool { return c.done }
