// Command mcs-controller is Causeway's Multi-Cluster Services controller;
// see package github.com/causeway-net/causeway/pkg/mcs/controller.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/mcs/controller"
)

func main() {
	if err := controller.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
