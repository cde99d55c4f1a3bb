package ctl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
)

// labBinary is the lab's binary: next to causewayctl, or on PATH.
const labBinary = "causeway-lab"

// newBenchmarkCommand is `causewayctl benchmark …`: the benchmarks run on
// the lab, so they are the lab's (`causeway-lab benchmark …`, which this
// runs with the same arguments); causewayctl links no lab code.
func newBenchmarkCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "benchmark (throughput|latency|propagation|scale) [flags]",
		Short: "Measure the lab's dataplane against a raw veth baseline (runs causeway-lab benchmark)",
		Long: `The benchmarks measure the local lab: throughput and latency between two
lab pods in different clusters through a clusterset VIP, and export and
endpoint-removal propagation, each with a baseline measured in the same
run; and the lab's daemons beside simulated members in its broker
(scale). They are causeway-lab's (causeway-lab benchmark --help lists them);
causewayctl benchmark runs causeway-lab benchmark with the same arguments,
found next to causewayctl or on PATH.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := findLabBinary()
			if err != nil {
				return err
			}
			c := exec.CommandContext(cmd.Context(), path, append([]string{"benchmark"}, args...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = c.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			return err
		},
	}
}

func findLabBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), labBinary); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(labBinary)
	if err != nil {
		return "", fmt.Errorf("the benchmarks are the lab's: no %s next to causewayctl or on PATH (make build puts it in bin/)", labBinary)
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
