// Command globalnet is Causeway's globalnet controller; see package
// github.com/causeway-net/causeway/pkg/globalnet/controller.
package main

import (
	"os"

	"github.com/causeway-net/causeway/pkg/globalnet/controller"
)

func main() {
	if err := controller.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
