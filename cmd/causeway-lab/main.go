// Command causeway-lab runs a whole ClusterSet on one machine and
// measures it; see package labcmd.
package main

import (
	"os"

	labcmd "github.com/causeway-net/causeway/lab/cmd"
)

func main() {
	if err := labcmd.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
