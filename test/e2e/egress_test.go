package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/globalnet"
)

// TestLabNamespaceEgress: in the default (globalnet) lab, with whereami
// exported from c2, c1's client in namespace demo reaches it from one of c1's cluster-wide
// egress addresses; once demo is labelled causeway.dev/global-egress=1
// it gets a GlobalEgress with its own IP in c1's global CIDR and its
// pods' addresses, and c2's server sees the client at that IP; the label
// removed, the object is released and the client leaves from the
// cluster-wide addresses again.
func TestLabNamespaceEgress(t *testing.T) {
	l := StartLab(t)
	ctx := context.Background()
	c1 := l.Client("c1")
	layout, err := globalnet.ClusterLayout(l.globalCIDR(ctx, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	// seenByC2 is the address c2's whereami sees c1's demo client at.
	seenByC2 := func() (netip.Addr, error) {
		for range 12 {
			id, err := l.whereami("c1/demo/client", "http://whereami.demo.svc.clusterset.local")
			if err != nil {
				return netip.Addr{}, err
			}
			if id.Cluster == "c2" {
				host, _, _ := strings.Cut(id.Client, ":")
				return netip.ParseAddr(host)
			}
		}
		return netip.Addr{}, fmt.Errorf("no answer from c2")
	}
	// c2 exports whereami (lab up exports nothing); the first answer
	// waits for c1's import to converge (the clusterset name resolving).
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c2"); err != nil {
		t.Fatalf("export from c2: %v\n%s", err, out)
	}
	waitForWithin(t, 2*time.Minute, "c2 seeing c1's client at a cluster-wide egress address", func() error {
		if a, err := seenByC2(); err != nil || !slices.Contains(layout.Egress, a) {
			return fmt.Errorf("seen as %s (%v), want one of %v", a, err, layout.Egress)
		}
		return nil
	})

	// setLabel sets (or, with "", removes) the egress label of c1's demo
	// namespace by a merge patch: no read-modify-write to conflict.
	setLabel := func(value string) {
		t.Helper()
		v := "null"
		if value != "" {
			v = strconv.Quote(value)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, v1alpha1.LabelGlobalEgress, v)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
		if err := c1.Patch(ctx, ns, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("label namespace demo %s: %v", patch, err)
		}
	}
	setLabel("1")
	start := time.Now()
	var nsIP netip.Addr
	clientPod := &corev1.Pod{}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, clientPod); err != nil {
		t.Fatal(err)
	}
	waitForWithin(t, 2*time.Minute, "c1's GlobalEgress demo allocated with the client's address", func() error {
		ge := &v1alpha1.GlobalEgress{}
		if err := c1.Get(ctx, client.ObjectKey{Name: "demo"}, ge); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(ge.Status.Conditions, v1alpha1.ConditionAllocated) || len(ge.Spec.IPs) != 1 ||
			!slices.Contains(ge.Spec.Pods, clientPod.Status.PodIP) {
			return fmt.Errorf("GlobalEgress %+v %+v", ge.Spec, ge.Status.Conditions)
		}
		var err error
		nsIP, err = netip.ParseAddr(ge.Spec.IPs[0])
		if err != nil || !layout.Ingress.Contains(nsIP) {
			return fmt.Errorf("egress IP %q: want an address of c1's pool %s", ge.Spec.IPs[0], layout.Ingress)
		}
		return nil
	})
	waitForWithin(t, 2*time.Minute, "c2 seeing c1's client at demo's own egress IP", func() error {
		if a, err := seenByC2(); err != nil || a != nsIP {
			return fmt.Errorf("seen as %s (%v), want %s", a, err, nsIP)
		}
		return nil
	})
	t.Logf("labelled: c2 saw c1's client at demo's egress IP %s after %.2fs", nsIP, time.Since(start).Seconds())

	setLabel("")
	waitForWithin(t, 2*time.Minute, "c1's GlobalEgress demo released and c2 seeing the cluster-wide egress again", func() error {
		ge := &v1alpha1.GlobalEgress{}
		if err := c1.Get(ctx, client.ObjectKey{Name: "demo"}, ge); err == nil && ge.Spec.ReleasedAt == nil {
			return fmt.Errorf("not released: %+v", ge.Spec)
		}
		if a, err := seenByC2(); err != nil || !slices.Contains(layout.Egress, a) {
			return fmt.Errorf("seen as %s (%v), want one of %v", a, err, layout.Egress)
		}
		return nil
	})
}
