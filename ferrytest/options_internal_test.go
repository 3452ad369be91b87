package ferrytest

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrymq/ferry/transport"
)

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Option{Seeds(0), Members(0), Members(9), Quantum(time.Microsecond), MaxSteps(0), Faults(Fault(99)), WithLogger(nil)} {
		if c := newConfig([]Option{o}); !errors.Is(c.err, transport.ErrInvalidOption) {
			t.Errorf("newConfig(%T) err = %v, want ErrInvalidOption", o, c.err)
		}
	}
	t.Setenv(EnvSeeds, "many")
	if c := newConfig(nil); !errors.Is(c.err, transport.ErrInvalidOption) {
		t.Errorf("%s=many: err = %v, want ErrInvalidOption", EnvSeeds, c.err)
	}
	t.Setenv(EnvSeeds, "7")
	if c := newConfig([]Option{Seeds(3)}); c.err != nil || c.seeds != 7 {
		t.Errorf("%s=7 over Seeds(3): %d seeds (%v)", EnvSeeds, c.seeds, c.err)
	}
	t.Setenv(EnvSeed, "x")
	if _, _, err := envSeed(); !errors.Is(err, transport.ErrInvalidOption) {
		t.Errorf("%s=x: err = %v, want ErrInvalidOption", EnvSeed, err)
	}
}
