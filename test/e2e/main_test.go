package e2e

import (
	"runtime"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// The tests' Kubernetes clients log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	// Keep the main goroutine on the main thread for good, so that no
	// other goroutine ever runs there: netnsx.Do leaves the thread it
	// used in a pod's namespace, and a process whose main thread is in a
	// lab namespace (/proc/<pid>/ns/net) is killed by `lab down`.
	runtime.LockOSThread()
}
