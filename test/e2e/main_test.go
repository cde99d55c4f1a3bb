package e2e

import (
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// The tests' Kubernetes clients log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
}
