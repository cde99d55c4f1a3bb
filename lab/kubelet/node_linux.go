package kubelet

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// Version is the kubelet version the lab nodes report.
const Version = "v1.37.2-lab"

// MaxPods is the pod capacity a lab node reports.
const MaxPods = 110

// NodeLeaseNamespace holds the nodes' heartbeat Leases.
const NodeLeaseNamespace = "kube-node-lease"

// LeaseDurationSeconds is the lease duration a node announces.
const LeaseDurationSeconds = 40

// nodeLabels are the labels the kubelet sets on its Node.
func (k *Kubelet) nodeLabels() map[string]string {
	l := map[string]string{
		corev1.LabelHostname:   k.cfg.Node.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	maps.Copy(l, k.cfg.Labels)
	return l
}

// nodeAddresses are the node's InternalIP (eth0; on dual-stack nodes its
// IPv4, then its IPv6 address), ExternalIP (wan0, gateway nodes only) and
// Hostname.
func (k *Kubelet) nodeAddresses() []corev1.NodeAddress {
	var a []corev1.NodeAddress
	for _, ip := range k.hostIPs() {
		a = append(a, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if k.cfg.Node.Gateway() {
		a = append(a, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: k.cfg.Node.WANAddress.Addr().String()})
	}
	return append(a, corev1.NodeAddress{Type: corev1.NodeHostName, Address: k.cfg.Node.Name})
}

// nodeConditions are the conditions a healthy lab node reports, without
// times.
func nodeConditions() []corev1.NodeCondition {
	return []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated", Message: "lab routes are set up by netlab"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "lab kubelet is posting ready status"},
	}
}

// mergeNodeConditions sets want in have: heartbeat time now; transition
// time kept while the status stays.
func mergeNodeConditions(have, want []corev1.NodeCondition, now metav1.Time) []corev1.NodeCondition {
	out := append([]corev1.NodeCondition(nil), have...)
	for _, w := range want {
		w.LastHeartbeatTime = now
		w.LastTransitionTime = now
		found := false
		for i := range out {
			if out[i].Type != w.Type {
				continue
			}
			found = true
			if out[i].Status == w.Status {
				w.LastTransitionTime = out[i].LastTransitionTime
			}
			out[i] = w
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}

// hostIPs are the node's eth0 addresses: IPv4, and IPv6 on dual-stack
// nodes.
func (k *Kubelet) hostIPs() []string {
	ips := []string{k.cfg.Node.Address.Addr().String()}
	if k.cfg.Node.Address6.IsValid() {
		ips = append(ips, k.cfg.Node.Address6.Addr().String())
	}
	return ips
}

// register creates the Node or brings an existing one's labels and pod
// CIDR in line, then posts its status.
func (k *Kubelet) register(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	podCIDR := k.cfg.Node.PodCIDR.String()
	podCIDRs := []string{podCIDR}
	if k.cfg.Node.PodCIDR6.IsValid() {
		podCIDRs = append(podCIDRs, k.cfg.Node.PodCIDR6.String())
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, k.cfg.Node.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n = &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Node.Name, Labels: k.nodeLabels()},
				Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: podCIDRs},
			}
			_, err = nodes.Create(ctx, n, metav1.CreateOptions{})
			if err == nil {
				k.log.Info("registered node", "node", k.cfg.Node.Name, "podCIDR", podCIDR)
			}
			return err
		}
		if err != nil {
			return err
		}
		want := n.DeepCopy()
		if want.Labels == nil {
			want.Labels = map[string]string{}
		}
		maps.Copy(want.Labels, k.nodeLabels())
		if want.Spec.PodCIDR == "" {
			want.Spec.PodCIDR, want.Spec.PodCIDRs = podCIDR, podCIDRs
		} else if want.Spec.PodCIDR != podCIDR {
			// spec.podCIDR cannot change once set; pods still get
			// addresses from the lab's slice.
			k.log.Warn("node has a different pod CIDR than the lab gives it", "node", n.Name, "have", n.Spec.PodCIDR, "lab", podCIDR)
		}
		if equality.Semantic.DeepEqual(want, n) {
			return nil
		}
		_, err = nodes.Update(ctx, want, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("register node %s: %w", k.cfg.Node.Name, err)
	}
	return k.updateNodeStatus(ctx)
}

// updateNodeStatus posts the node's addresses, capacity, info and
// conditions with a fresh heartbeat time.
func (k *Kubelet) updateNodeStatus(ctx context.Context) error {
	nodes := k.cfg.Client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, k.cfg.Node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(k.memory, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(MaxPods, resource.DecimalSI),
		}
		n.Status.Capacity = capacity
		n.Status.Allocatable = capacity.DeepCopy()
		n.Status.Addresses = k.nodeAddresses()
		n.Status.NodeInfo = k.nodeInfo
		if k.cfg.Serving != nil {
			n.Status.DaemonEndpoints.KubeletEndpoint.Port = APIPort
		}
		n.Status.Conditions = mergeNodeConditions(n.Status.Conditions, nodeConditions(), now)
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update status of node %s: %w", k.cfg.Node.Name, err)
	}
	return nil
}

// renewLease creates or renews the node's Lease in kube-node-lease.
func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.cfg.Client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, k.cfg.Node.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Node.Name, Namespace: NodeLeaseNamespace},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptrTo(k.cfg.Node.Name),
					LeaseDurationSeconds: ptrTo(int32(LeaseDurationSeconds)),
					RenewTime:            &now,
				},
			}
			if ref, err := k.nodeOwnerRef(ctx); err == nil {
				l.OwnerReferences = []metav1.OwnerReference{ref}
			}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptrTo(k.cfg.Node.Name)
		l.Spec.LeaseDurationSeconds = ptrTo(int32(LeaseDurationSeconds))
		l.Spec.RenewTime = &now
		if len(l.OwnerReferences) == 0 {
			if ref, err := k.nodeOwnerRef(ctx); err == nil {
				l.OwnerReferences = []metav1.OwnerReference{ref}
			}
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("renew lease of node %s: %w", k.cfg.Node.Name, err)
	}
	return nil
}

// nodeOwnerRef makes the Lease go with its Node.
func (k *Kubelet) nodeOwnerRef(ctx context.Context) (metav1.OwnerReference, error) {
	n, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.Node.Name, metav1.GetOptions{})
	if err != nil {
		return metav1.OwnerReference{}, err
	}
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}, nil
}

// heartbeat registers the node (retrying until it succeeds), then renews
// the lease every LeasePeriod and the node status every StatusPeriod until
// ctx is done.
func (k *Kubelet) heartbeat(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for {
		err := k.register(ctx)
		if err == nil {
			break
		}
		k.log.Warn("node registration failed; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
	if err := k.renewLease(ctx); err != nil {
		k.log.Warn("lease", "err", err)
	}
	lease := time.NewTicker(k.cfg.LeasePeriod)
	defer lease.Stop()
	status := time.NewTicker(k.cfg.StatusPeriod)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("lease", "err", err)
			}
		case <-status.C:
			// register, not only the status: a Node deleted
			// behind our back comes back.
			if err := k.register(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("node status", "err", err)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
