package e2e

import (
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The tests' Kubernetes clients log nothing worth reading.
func init() { ctrllog.SetLogger(logr.Discard()) }
