// Package labcmd is causeway-lab's command line: bring the lab up and
// down, look into it (status, kubectl, kubeconfig, exec, logs), the
// processes the lab runs of itself (supervise, kubelet, app), and the
// lab benchmarks. It is not the product: causewayctl links none of it.
package labcmd
