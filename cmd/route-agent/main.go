// Command route-agent is the Causeway route-agent daemon; see package routeagent.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/routeagent"
)

func main() {
	if err := routeagent.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
