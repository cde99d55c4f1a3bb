// Command gateway is the Causeway gateway daemon; see package gateway.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/gateway"
)

func main() {
	if err := gateway.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
