// Package apps holds the lab's built-in "images": programs the lab kubelet
// runs as a pod's container when the pod names one of their images.
//
//	causeway.dev/lab/whereami  HTTP on the container port answering GET /
//	                           with the cluster, namespace, pod, pod IP and
//	                           the client's address as the server sees it;
//	                           UDP echo on the same port with the same
//	                           identity.
//	causeway.dev/lab/client    sleeps until killed; a place for `lab exec`.
//
// Each program runs as its own process (causeway-lab's hidden
// `app <name>` subcommand calls RunWhereami or RunClient). A Registry
// maps an image reference to the command line that runs it; a container
// of an image it does not know runs its own command from the host's
// filesystem, and without a command gives an error wrapping
// ErrUnknownImage, which the kubelet turns into a waiting reason. Registry.Register is the seam for images backed by
// real binaries (e.g. CoreDNS).
//
// Two more programs serve `causeway-lab benchmark` inside lab pods: rr
// (UDP request/response latency) and probe (the time of the first TCP
// connect that succeeds to each target it is given).
package apps
