package lab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
)

// Down stops every process of the lab in dir and removes everything it
// made: namespaces (and their links), cgroups, WireGuard sockets, bpffs
// pins and the state directory. prefix is used when no state is left.
// It returns an error when anything is left behind.
func Down(dir, prefix string, out io.Writer) error {
	p := &progress{out: out, start: time.Now()}
	var hostChanges *HostChanges
	if st, err := Load(dir); err == nil {
		prefix, hostChanges = st.Prefix, st.HostChanges
		if pid, ok := st.supervisorRunning(); ok {
			if err := controlplane.StopPIDFile(st.supervisorPID(), 30*time.Second); err != nil {
				return fmt.Errorf("stop the supervisor: %w", err)
			}
			p.say("supervisor (pid %d) and its processes stopped", pid)
		}
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: prefix})
	if err != nil {
		return err
	}
	rep, err := h.Teardown()
	if err != nil {
		return fmt.Errorf("tear down the lab network: %w", err)
	}
	if !rep.Empty() {
		p.say("removed: %s", rep)
	}
	if err := unmountBPFFS(filepath.Join(dir, "bpffs")); err != nil {
		return err
	}
	// Only once nothing of the lab runs: the real kubelets' sysctls and
	// mount points.
	if err := restoreHost(hostChanges); err != nil {
		return err
	}
	if hostChanges != nil {
		p.say("host restored: sysctls %v, %d mount points removed", hostChanges.Sysctls, len(hostChanges.Created))
	}
	if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		p.say("removed %s", dir)
	}
	left, err := h.Leftovers()
	if err != nil {
		return err
	}
	if !left.Empty() {
		return fmt.Errorf("left behind: %s", left)
	}
	p.say("nothing left")
	return nil
}
