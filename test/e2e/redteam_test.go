package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/globalnet"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestRedTeam is issue 18's promise, in the default (globalnet) lab: c2
// turns attacker. Its daemons are stopped and it acts with nothing but
// its own broker identity (the token its Pods mount); c1 is the victim,
// serving a TCP stream and a UDP probe to a pod of c3 through its global
// IP:ports, and a clusterset VIP. c2 tries every class of write issue 18
// names. For each: the broker refuses what admission can refuse, c1 and
// c3 refuse the rest with a condition that `causewayctl diagnose` names,
// and every node of c1 and c3 keeps exactly the kernel state (links,
// routes, rules, neighbours, netfilter, BPF programs, tunnel peers, VIP
// maps) it had before the attack; the streams from c3 to c1 never stop.
func TestRedTeam(t *testing.T) {
	l := StartLab(t)
	ctx := context.Background()

	// The victim's traffic: c3's client pod → c1's echo pod, and c3 →
	// c1's whereami by clusterset VIP.
	c1gw := l.activeGateway(ctx, "c1")
	echo, tcpAddr, udpAddr := l.exportEcho(ctx, "c1", c1gw)
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c1"); err != nil {
		t.Fatalf("export whereami from c1: %v\n%s", err, out)
	}
	vip := l.importVIP(ctx, "c3", "whereami")
	cl := &corev1.Pod{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, cl); err != nil {
		t.Fatalf("c3 client pod: %v", err)
	}
	names := netlab.Names{Prefix: l.Prefix}
	serverNS := filepath.Join("/run/netns", names.Pod("c1", echo.Spec.NodeName, "demo", echo.Name))
	clientNS := filepath.Join("/run/netns", names.Pod("c3", cl.Spec.NodeName, "demo", cl.Name))
	tcp, udp := startStreams(t, serverNS, clientNS, streamEnds{"7070", tcpAddr}, streamEnds{"7071", udpAddr}, 20*time.Millisecond)
	l.curlClusters("c3/demo/client", "http://"+vip, []string{"c1"})

	// c2 turns attacker: its gateways and MCS controller stop, so
	// nothing of its own rewrites what it writes by hand.
	l.stopMemberDaemons(ctx, "c2")
	att := l.memberClient(ctx, "c2")
	waitFor(t, "c3's import of whereami from c1 only", l.sourcesOf(ctx, "c3", "whereami", "c1"))
	before := l.importerState(vip)
	attackStart := time.Now()

	honestCluster, honestEndpoint := &v1alpha1.Cluster{}, &v1alpha1.Endpoint{}
	ns := broker.Namespace("c2")
	for _, o := range []client.Object{honestCluster, honestEndpoint} {
		if err := att.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c2"}, o); err != nil {
			t.Fatalf("c2 reads its own %T with its broker identity: %v", o, err)
		}
	}
	victimEP := &v1alpha1.Endpoint{}
	if err := att.Get(ctx, client.ObjectKey{Namespace: broker.Namespace("c1"), Name: "c1"}, victimEP); err != nil {
		t.Fatalf("c2 reads c1's Endpoint: %v", err)
	}
	c1Global := l.globalCIDR(ctx, "c1")

	// announce replaces c2's Cluster and Endpoint specs; the write may
	// be refused by the broker's admission (refused is then true).
	announce := func(what string, cl func(*v1alpha1.ClusterSpec), ep func(*v1alpha1.EndpointSpec)) (refused bool) {
		t.Helper()
		for _, o := range []client.Object{honestCluster.DeepCopy(), honestEndpoint.DeepCopy()} {
			have := o.DeepCopyObject().(client.Object)
			if err := att.Get(ctx, client.ObjectKeyFromObject(o), have); err != nil {
				t.Fatalf("%s: read c2's %T: %v", what, o, err)
			}
			switch h := have.(type) {
			case *v1alpha1.Cluster:
				h.Spec = *honestCluster.Spec.DeepCopy()
				if cl != nil {
					cl(&h.Spec)
				}
			case *v1alpha1.Endpoint:
				h.Spec = *honestEndpoint.Spec.DeepCopy()
				if ep != nil {
					ep(&h.Spec)
				}
			}
			if err := att.Update(ctx, have); err != nil {
				if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
					t.Logf("%s: the broker refused c2's %T: %v", what, o, err)
					refused = true
					continue
				}
				t.Fatalf("%s: update c2's %T: %v", what, o, err)
			}
		}
		return refused
	}
	// What names c2 in c1's and c3's kernels: its honest subnets and
	// its gateways' addresses. Refusing c2 may drop them (c2 loses its
	// own reachability); it must change nothing else, and c2's space
	// must stay fail-closed.
	var c2Space []netip.Prefix
	for _, s := range append(slices.Clone(honestEndpoint.Spec.Subnets), honestEndpoint.Spec.PublicIP+"/32", honestEndpoint.Spec.PrivateIP+"/32") {
		if p, err := netip.ParsePrefix(s); err == nil {
			c2Space = append(c2Space, p)
		}
	}
	c2Addr := firstHost(t, honestEndpoint.Spec.Subnets[0])
	// untouched checks the victim's and the third cluster's kernels
	// and their traffic after an attack.
	untouched := func(what string, also ...netip.Prefix) {
		t.Helper()
		space := append(slices.Clone(c2Space), also...)
		// The route agents and gateways act on a change within a
		// second; give a wrong one time to show.
		time.Sleep(3 * time.Second)
		d := before.without(space...).diff(l.importerState(vip).without(space...))
		if d != "" {
			t.Errorf("%s: c1's and c3's kernels changed:\n%s", what, d)
		}
		l.failClosed(what, []string{"c1", "c3"}, c2Addr)
		if err := tcp.Err(); err != nil {
			t.Fatalf("%s: the TCP stream c3 → c1 broke: %v", what, err)
		}
		l.curlClusters("c3/demo/client", "http://"+vip, []string{"c1"})
		if d == "" {
			t.Logf("%s: c1's and c3's kernels unchanged but for c2's space, c3 → c1 flowing", what)
		}
	}
	// refusedBy waits until importer's mirror of c2's Endpoint is
	// Valid=False with one of reasons, and diagnose names it.
	refusedBy := func(what string, importer string, reasons ...string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%s: %s refuses c2 (%v)", what, importer, reasons), func() error {
			ep := &v1alpha1.Endpoint{}
			if err := l.Client(importer).Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: "c2"}, ep); err != nil {
				return err
			}
			c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionValid)
			if c == nil || c.Status != metav1.ConditionFalse {
				return fmt.Errorf("Valid condition %+v", c)
			}
			for _, r := range reasons {
				if c.Reason == r {
					return nil
				}
			}
			return fmt.Errorf("Valid=False with reason %s (%s), want one of %v", c.Reason, c.Message, reasons)
		})
		out, err := l.causewayctl("diagnose")
		if !strings.Contains(out, importer+": remote c2 refused") {
			t.Errorf("%s: diagnose (%v) does not name %s's refusal of c2:\n%s", what, err, importer, out)
		}
	}
	refusedEverywhere := func(what string, reasons ...string) {
		t.Helper()
		for _, importer := range []string{"c1", "c3"} {
			refusedBy(what, importer, reasons...)
		}
	}

	// 1. Public address space through globalnet claims.
	for _, name := range []string{"8.0.0.0-8", "8.0.0.0-24", "0.0.0.0-1", "128.0.0.0-1", "242.0.0.0-16", "242.0.200.0-25"} {
		gc := &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{broker.LabelClusterID: "c2"}},
			Spec: v1alpha1.GlobalCIDRSpec{ClusterID: "c2"}}
		if err := att.Create(ctx, gc); err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
			t.Errorf("the broker let c2 claim global CIDR %s: %v", name, err)
		}
	}
	// Blocks of the right size in the supernet are c2's to claim, but
	// beyond its quota they count for nobody.
	var extra []netip.Prefix
	for _, s := range []string{"242.0.201.0/24", "242.0.202.0/24", "242.0.203.0/24"} {
		p := netip.MustParsePrefix(s)
		gc := &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: globalnet.CIDRObjectName(p), Labels: map[string]string{broker.LabelClusterID: "c2"}},
			Spec: v1alpha1.GlobalCIDRSpec{ClusterID: "c2"}}
		if err := att.Create(ctx, gc); err != nil {
			t.Fatalf("c2 claims %s: %v", p, err)
		}
		extra = append(extra, p)
	}
	untouched("global CIDR claims of a public /8, the halves of IPv4, wrong sizes, and beyond the quota")

	// 2. A public /8, announced in c2's Cluster and Endpoint.
	if !announce("a public /8", func(c *v1alpha1.ClusterSpec) {
		c.GlobalCIDRs = nil
		c.PodCIDRs = []string{"8.0.0.0/8"}
	}, func(e *v1alpha1.EndpointSpec) { e.Subnets = []string{"8.0.0.0/8"} }) {
		refusedEverywhere("a public /8", v1alpha1.ReasonCIDRNotAllowed, v1alpha1.ReasonInvalidCluster)
	}
	untouched("a public /8 in c2's Cluster and Endpoint")

	// 3. A global CIDR over its quota, and c1's own.
	for _, p := range []netip.Prefix{extra[0], c1Global} {
		what := "global CIDR " + p.String()
		if !announce(what, func(c *v1alpha1.ClusterSpec) { c.GlobalCIDRs = []string{p.String()} },
			func(e *v1alpha1.EndpointSpec) {
				e.Subnets = []string{p.String()}
				e.HealthCheckIP = firstHost(t, p.String()).String()
			}) {
			refusedEverywhere(what, v1alpha1.ReasonUnclaimedGlobalCIDR, v1alpha1.ReasonOverlappingCIDR, v1alpha1.ReasonInvalidCluster)
		}
		untouched(what)
	}

	// 4. c3's pod CIDR, without globalnet: c3's claim is older.
	// … unclaimed: refused everywhere. Then claimed by c2 (a claim of
	// its own, in its own namespace, which admission lets through): c3
	// (globalnet: reached through its global CIDR, its IPv4 pod CIDR
	// claims nothing) refuses its own space; c1 may take the claim as
	// c2's direct space — it routes none of c3's traffic, which crosses
	// at c3's global addresses.
	c3Pods := netip.MustParsePrefix("10.245.0.0/16")
	announceC3Pods := func(what string) bool {
		return announce(what, func(c *v1alpha1.ClusterSpec) {
			c.GlobalCIDRs = nil
			c.PodCIDRs = []string{c3Pods.String()}
		}, func(e *v1alpha1.EndpointSpec) {
			e.Subnets = []string{c3Pods.String()}
			e.HealthCheckIP = firstHost(t, c3Pods.String()).String()
		})
	}
	if !announceC3Pods("c3's pod CIDR") {
		refusedEverywhere("c3's pod CIDR", v1alpha1.ReasonOverlappingCIDR, v1alpha1.ReasonCIDRNotClaimed, v1alpha1.ReasonInvalidCluster)
	}
	untouched("c3's pod CIDR announced by c2")
	cc := broker.NewCIDRClaim("c2", c3Pods)
	if err := att.Create(ctx, cc); err != nil {
		t.Fatalf("c2 claims %s in its own namespace: %v", c3Pods, err)
	}
	if !announceC3Pods("c3's pod CIDR, claimed by c2") {
		refusedBy("c3's pod CIDR, claimed by c2", "c3", v1alpha1.ReasonOverlappingCIDR, v1alpha1.ReasonInvalidCluster)
	}
	untouched("c3's pod CIDR, claimed by c2", c3Pods)
	if err := att.Delete(ctx, cc); err != nil {
		t.Fatal(err)
	}

	// 5. c1's tunnel public key in c2's Endpoint.
	if !announce("c1's public key", nil, func(e *v1alpha1.EndpointSpec) { e.PublicKey = victimEP.Spec.PublicKey }) {
		refusedEverywhere("c1's public key", v1alpha1.ReasonKeyInUse)
	}
	untouched("c1's public key announced by c2")
	announce("back to c2's honest objects", nil, nil)

	// 6. The VIP of a Service c2 does not export, taken before anyone
	// exports it: c1 then exports it, and the VIP is not c2's.
	squatted := types.NamespacedName{Namespace: "demo", Name: "squatted"}
	var first netip.Addr
	for a := range mcs.MustParseVIPRange(mcs.DefaultVIPRange).Candidates(squatted.Namespace, squatted.Name) {
		first = a
		break
	}
	va := &v1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: mcs.VIPObjectName(first), Labels: map[string]string{broker.LabelClusterID: "c2"}},
		Spec: v1alpha1.VIPAllocationSpec{ServiceNamespace: squatted.Namespace, ServiceName: squatted.Name}}
	if err := att.Create(ctx, va); err != nil {
		t.Fatalf("c2 takes %s, the first VIP of %s: %v", first, squatted, err)
	}
	l.exportCopy(ctx, "c1", "whereami", squatted.Name)
	squattedVIP := l.importVIP(ctx, "c3", squatted.Name)
	if squattedVIP == first.String() {
		t.Errorf("c3 imports %s at %s, the address c2 took before anyone exported it", squatted, first)
	}
	l.curlClusters("c3/demo/client", "http://"+squattedVIP, []string{"c1"})
	before = l.importerState(vip) // the new import changed the VIP maps, as it should

	// 7. An export record of whereami whose parts never arrive.
	head := incompleteHead(ctx, t, att, "c1", "c2", "demo", "whereami")
	waitFor(t, "c3's import of whereami from c1 only, with c2's incomplete record", l.sourcesOf(ctx, "c3", "whereami", "c1"))
	untouched("a record head whose parts never arrive")
	if err := att.Delete(ctx, head); err != nil {
		t.Fatal(err)
	}

	// 8. A flood of records: the broker's quota stops it, and an honest
	// export of c1 is still reachable from c3.
	// The administrator's quota for c2, lowered from the policy's so
	// that the flood meets it within seconds (the quota is per member:
	// the policy stays as every daemon read it).
	q := &corev1.ResourceQuota{}
	if err := l.Client("broker").Get(ctx, client.ObjectKey{Namespace: ns, Name: broker.QuotaName}, q); err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard[corev1.ResourceName("count/serviceexportrecords.causeway.dev")] = resource.MustParse("200")
	if err := l.Client("broker").Update(ctx, q); err != nil {
		t.Fatalf("lower c2's record quota: %v", err)
	}
	waitFor(t, "c2's lowered quota enforced", func() error {
		if err := l.Client("broker").Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			return err
		}
		if !q.Status.Hard[corev1.ResourceName("count/serviceexportrecords.causeway.dev")].Equal(resource.MustParse("200")) {
			return fmt.Errorf("status hard %v", q.Status.Hard)
		}
		return nil
	})
	written, refusedAt := l.floodRecords(ctx, att, "c2")
	t.Logf("c2's record flood: %d records written, the broker refused the next (%v)", written, refusedAt)
	if refusedAt == nil {
		t.Errorf("the broker took %d records of c2 without a quota", written)
	}
	start := time.Now()
	l.exportCopy(ctx, "c1", "whereami", "after-flood")
	afterVIP := l.importVIP(ctx, "c3", "after-flood")
	l.curlClusters("c3/demo/client", "http://"+afterVIP, []string{"c1"})
	t.Logf("FIGURE export → reachable from c3 during c2's flood: %v", time.Since(start).Round(time.Millisecond))

	// The streams never stopped.
	gapTCP, gapUDP := tcp.Gap(attackStart), udp.Gap(attackStart)
	t.Logf("streams c3 → c1 during the attacks: longest silence TCP %v, UDP %v (%d of %d lost)",
		gapTCP.Longest.Round(time.Millisecond), gapUDP.Longest.Round(time.Millisecond), gapUDP.Lost, gapUDP.Sent)
	if err := tcp.Err(); err != nil || gapUDP.Longest > time.Second {
		t.Errorf("c3 → c1 interrupted during the attacks: TCP %v, UDP longest silence %v", err, gapUDP.Longest)
	}
}

// firstHost is the first address after cidr's network address.
func firstHost(t *testing.T, cidr string) netip.Addr {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return p.Masked().Addr().Next()
}

// failClosed checks that every node of clusters fails closed for addr:
// its route lookup leaves by a tunnel or overlay device (not the node's
// own link), or an unreachable route answers ("No route to host"). The
// lab's nodes have no default route, so a lookup that finds no route at
// all ("Network is unreachable") fails the check too: on a real node it
// would take the default route, unencrypted.
func (l *Lab) failClosed(what string, clusters []string, addr netip.Addr) {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	h, err := st.Host()
	if err != nil {
		l.t.Fatal(err)
	}
	for _, c := range st.Topology.Clusters {
		if !slices.Contains(clusters, c.Name) {
			continue
		}
		for _, n := range c.Nodes {
			ns := h.Names().Node(c.Name, n.Name)
			got, err := exec.Command("ip", "-n", ns, "route", "get", addr.String()).CombinedOutput()
			switch {
			case err != nil && !strings.Contains(string(got), "No route to host"):
				l.t.Errorf("%s: %s/%s has no route, not even an unreachable one, for %s (c2's): %v: %s", what, c.Name, n.Name, addr, err, got)
			case err == nil && slices.Contains(strings.Fields(string(got)), netlab.NodeLink):
				l.t.Errorf("%s: %s/%s routes %s (c2's) out of its own link: %s", what, c.Name, n.Name, addr, got)
			}
		}
	}
}

// stopMemberDaemons stops cluster's gateways (their DaemonSet pinned to
// no node) and MCS controller (scaled to 0), and waits until their Pods
// are gone: what the member then has in the broker is what the test
// writes with its identity.
func (l *Lab) stopMemberDaemons(ctx context.Context, cluster string) {
	l.t.Helper()
	c := l.Client(cluster)
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: "causeway-gateway"}, ds); err != nil {
		l.t.Fatal(err)
	}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"causeway.dev/red-team": "no-node-has-this"}
	if err := c.Update(ctx, ds); err != nil {
		l.t.Fatalf("%s: stop the gateways: %v", cluster, err)
	}
	l.scale(ctx, cluster, mcsController, 0)
	waitForWithin(l.t, time.Minute, cluster+"'s gateway Pods gone", func() error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(kube.Namespace), client.MatchingLabels(ds.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d gateway Pods left", len(pods.Items))
		}
		return nil
	})
}

// exportCopy creates in cluster's namespace demo a Service name with the
// selector and ports of Service of, and exports it.
func (l *Lab) exportCopy(ctx context.Context, cluster, of, name string) {
	l.t.Helper()
	c := l.Client(cluster)
	orig := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: of}, orig); err != nil {
		l.t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
		Spec: corev1.ServiceSpec{Selector: orig.Spec.Selector, Ports: orig.Spec.Ports}}
	if err := c.Create(ctx, svc); err != nil {
		l.t.Fatalf("%s: create Service demo/%s: %v", cluster, name, err)
	}
	if out, err := l.causewayctl("export", "demo/"+name, "--cluster", cluster); err != nil {
		l.t.Fatalf("export demo/%s from %s: %v\n%s", name, cluster, err, out)
	}
}

// floodRecords writes, with member's identity, export records of
// ClusterSetIP Services of namespace demo with 100 ports each until the
// broker refuses one (or floodMax), and returns how many it wrote and the
// refusal.
func (l *Lab) floodRecords(ctx context.Context, member client.Client, cluster string) (int, error) {
	l.t.Helper()
	const floodMax = 5000
	ports := make([]v1alpha1.RecordPort, 100)
	for i := range ports {
		ports[i] = v1alpha1.RecordPort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)}
	}
	for i := range floodMax {
		name := fmt.Sprintf("flood-%d", i)
		r := &v1alpha1.ServiceExportRecord{
			ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(cluster), Name: mcs.RecordName("demo", name)},
			Spec: v1alpha1.ServiceExportRecordSpec{ClusterID: cluster, ServiceNamespace: "demo", ServiceName: name,
				Type: mcsv1beta1.ClusterSetIP, ExportCreationTimestamp: metav1.Now(), Ports: ports,
				ClusterIPs: []string{"10.96.200.1"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}},
		}
		if err := member.Create(ctx, r); err != nil {
			if apierrors.IsForbidden(err) {
				return i, err
			}
			l.t.Fatalf("flood record %d: %v", i, err)
		}
	}
	return floodMax, nil
}

// incompleteHead writes, with member's identity, a record of Service
// namespace/name in cluster's name: a copy of from's record whose head
// names a part 1 of 2 that is never written. It returns the head.
func incompleteHead(ctx context.Context, t *testing.T, member client.Client, from, cluster, namespace, name string) *v1alpha1.ServiceExportRecord {
	t.Helper()
	orig := &v1alpha1.ServiceExportRecord{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: broker.Namespace(from), Name: mcs.RecordName(namespace, name)}, orig); err != nil {
		t.Fatalf("%s reads %s's record of %s/%s: %v", cluster, from, namespace, name, err)
	}
	head := &v1alpha1.ServiceExportRecord{
		ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(cluster), Name: orig.Name, Labels: map[string]string{broker.LabelClusterID: cluster}},
		Spec:       *orig.Spec.DeepCopy(),
	}
	head.Spec.ClusterID = cluster
	head.Spec.Part = &v1alpha1.RecordPart{Index: 0, Count: 2, Revision: "neverwritten"}
	have := &v1alpha1.ServiceExportRecord{}
	err := member.Get(ctx, client.ObjectKeyFromObject(head), have)
	switch {
	case apierrors.IsNotFound(err):
		err = member.Create(ctx, head)
	case err == nil:
		have.Spec = head.Spec
		head = have
		err = member.Update(ctx, head)
	}
	if err != nil {
		t.Fatalf("%s writes a record head of %s/%s naming a part that never comes: %v", cluster, namespace, name, err)
	}
	return head
}
