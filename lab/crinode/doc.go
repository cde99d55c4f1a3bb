// Package crinode runs a lab node with a real kubelet and containerd
// (`causeway-lab up --runtime containerd`) instead of the lab kubelet:
// both run inside the node's network namespace and in a mount namespace
// of the node's own, where the fixed host paths of kubelet, containerd
// and CNI (MountPoints) are bind mounts of directories of the node's
// state directory, so several nodes share one machine without touching
// each other's or the host's files. Config renders what they read
// (kubelet configuration, containerd configuration, CNI network); Node
// runs them. See README.md.
package crinode
