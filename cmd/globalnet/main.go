// Command globalnet is the Causeway globalnet daemon; see package globalnet.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/globalnet"
)

func main() {
	if err := globalnet.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
