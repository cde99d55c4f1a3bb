package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/lab"
)

// LabPod is a pod of the lab as a benchmark endpoint.
type LabPod struct {
	st                      *lab.State
	cluster, namespace, pod string
	ip                      string
}

// NewLabPod resolves "<cluster>/<namespace>/<pod>" in the lab.
func NewLabPod(ctx context.Context, st *lab.State, ref string) (*LabPod, error) {
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%q: want <cluster>/<namespace>/<pod>", ref)
	}
	cl, err := st.Client(parts[0])
	if err != nil {
		return nil, err
	}
	p := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: parts[1], Name: parts[2]}, p); err != nil {
		return nil, fmt.Errorf("pod %s: %w", ref, err)
	}
	if p.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", ref)
	}
	return &LabPod{st: st, cluster: parts[0], namespace: parts[1], pod: parts[2], ip: p.Status.PodIP}, nil
}

// Name is the pod's reference.
func (p *LabPod) Name() string { return p.cluster + "/" + p.namespace + "/" + p.pod }

// IP is the pod's IP.
func (p *LabPod) IP() string { return p.ip }

// Start runs a program in the pod.
func (p *LabPod) Start(ctx context.Context, path string, args []string, out io.Writer) (*exec.Cmd, error) {
	return p.st.Exec(ctx, p.cluster, p.namespace, p.pod, path, args, nil, out, out)
}
