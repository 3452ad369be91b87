package chaos_test

import (
	"os"
	"testing"

	"github.com/ferrymq/ferry/internal/fauxqs"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "consumer" {
		consumerMain() // exits
	}
	os.Exit(fauxqs.Main(m))
}
