package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/netlab"
)

// LabPod is a pod of the lab as a benchmark endpoint.
type LabPod struct {
	st          *lab.State
	pod         netlab.Pod
	hostNetwork bool
	ip          string
	via         string // how IP reaches the pod, when not directly
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
	return &LabPod{st: st, pod: netlab.Pod{Cluster: parts[0], Node: p.Spec.NodeName, Namespace: parts[1], Name: parts[2]},
		hostNetwork: p.Spec.HostNetwork, ip: p.Status.PodIP}, nil
}

// Name is the pod's reference, and how it is reached when that is not
// its pod IP.
func (p *LabPod) Name() string {
	ref := p.pod.Cluster + "/" + p.pod.Namespace + "/" + p.pod.Name
	if p.via != "" {
		return ref + " (" + p.via + ")"
	}
	return ref
}

// IP is the pod's IP.
func (p *LabPod) IP() string { return p.ip }

// Start runs a program in the pod (without asking the API server: the
// pod was looked up by NewLabPod).
func (p *LabPod) Start(_ context.Context, path string, args []string, out io.Writer) (*exec.Cmd, error) {
	return p.st.ExecIn(p.pod, p.hostNetwork, path, args, nil, out, out)
}

// pairName labels the Service and ServiceExport of ExposeTo.
const pairName = "pair"

// ExposeTo makes p reachable from from in any lab shape: from a pod of
// the same cluster at its pod IP; from another cluster (whose pod IPs are
// not routed there under globalnet) through the clusterset VIP of a
// Service exported for the benchmark — p labelled, a Service selecting it
// with the benchmark's ports (iperf3 TCP, request/response UDP) and its
// ServiceExport — once from's cluster imports it. IP then answers that
// VIP. The returned function removes what ExposeTo created.
func (p *LabPod) ExposeTo(ctx context.Context, from *LabPod, timeout time.Duration) (cleanup func(), err error) {
	if from.pod.Cluster == p.pod.Cluster {
		return func() {}, nil
	}
	cl, err := p.st.Client(p.pod.Cluster)
	if err != nil {
		return nil, err
	}
	imp, err := p.st.Client(from.pod.Cluster)
	if err != nil {
		return nil, err
	}
	name := "causeway-bench-" + p.pod.Name
	if len(name) > 63 {
		name = name[:63]
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.pod.Namespace, Name: p.pod.Name}}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, LabelBenchmark, name))
	if err := cl.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return nil, fmt.Errorf("label pod %s: %w", p.Name(), err)
	}
	labels := map[string]string{LabelBenchmark: pairName}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.pod.Namespace, Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: map[string]string{LabelBenchmark: name}, Ports: []corev1.ServicePort{
			{Name: "iperf3", Protocol: corev1.ProtocolTCP, Port: iperfPort},
			{Name: "rr", Protocol: corev1.ProtocolUDP, Port: rrPort},
		}}}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: p.pod.Namespace, Name: name, Labels: labels}}
	cleanup = func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cl.Delete(dctx, export)
		_ = cl.Delete(dctx, svc)
		unlabel := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, LabelBenchmark))
		_ = cl.Patch(dctx, pod, client.RawPatch(types.MergePatchType, unlabel))
	}
	for _, o := range []client.Object{svc, export} {
		if err := cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			cleanup()
			return nil, fmt.Errorf("create %T %s/%s in %s: %w", o, p.pod.Namespace, name, p.pod.Cluster, err)
		}
	}
	var vip string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		si := &mcsv1beta1.ServiceImport{}
		if err := imp.Get(ctx, client.ObjectKey{Namespace: p.pod.Namespace, Name: name}, si); err != nil {
			return false, nil
		}
		for _, ip := range si.Spec.IPs {
			if a, err := netip.ParseAddr(ip); err == nil && a.Is4() == strings.Contains(p.ip, ".") {
				vip = ip
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("%s imports no clusterset VIP for %s/%s within %v: %w", from.pod.Cluster, p.pod.Namespace, name, timeout, err)
	}
	p.ip, p.via = vip, "clusterset VIP "+vip
	return cleanup, nil
}
