// Command causewayctl is Causeway's command line; see package ctl.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/ctl"
)

func main() {
	if err := ctl.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
