package routeagent

import (
	"os"
	"testing"
)

// mainEnv makes the test binary run the route agent's command instead of
// the tests, so process tests need no separate build.
const mainEnv = "ROUTEAGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "" {
		os.Exit(m.Run())
	}
	cmd := NewCommand()
	cmd.SetArgs(os.Args[1:])
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}
