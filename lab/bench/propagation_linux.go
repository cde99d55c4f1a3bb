package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/vip"
)

// Labels of the objects Propagation creates (and LabelBenchmark);
// Cleanup deletes by LabelBenchmark.
const (
	labelRole     = "causeway.dev/benchmark-role"
	benchmarkName = "propagation"
	namePrefix    = "propbench-"
	withdrawName  = namePrefix + "withdraw"
)

// Propagation measures, in a running lab, the two convergence targets of
// the brief end to end: how long after a ServiceExport is created a pod of
// another cluster can connect to the service's clusterset VIP, and how
// long after a backend pod is deleted it is gone from the VIP backend map
// of every node.
type Propagation struct {
	// Lab is the lab, up.
	Lab *lab.State
	// Self is the causeway-lab binary; its `app probe` runs in the
	// client pod.
	Self string
	// Exporter is the cluster the services are created and exported in.
	Exporter string
	// Client is the pod that connects to the VIPs,
	// "<cluster>/<namespace>/<pod>", in another cluster.
	Client string
	// Namespace holds the benchmark's services (in every cluster: the
	// MCS API imports a service only where its namespace exists).
	Namespace string
	// Selector picks the pods backing the exported services (in
	// Namespace of Exporter).
	Selector map[string]string
	// Port is the services' port; TargetPort the pods'.
	Port, TargetPort int32
	// Timeout bounds each step (one export, one removal, waiting for a
	// pod).
	Timeout time.Duration
	// Poll is how often the nodes' VIP maps are read.
	Poll time.Duration
	// Progress receives one line per sample; nil discards.
	Progress io.Writer
}

// ExportResult is what MeasureExport measured, from the creation of each
// ServiceExport.
type ExportResult struct {
	// Imported: a ServiceImport with a VIP appears in the client's
	// cluster (watched, as its route agents watch it).
	Imported Stats `json:"imported"`
	// Programmed: the client's node's VIP map has a backend for VIP:port
	// (read every Poll once the VIP is known).
	Programmed Stats `json:"programmed"`
	// Reachable: the first TCP connect from the client pod to VIP:port
	// succeeds (connect4 translation on the client's node, the route to
	// the gateway, the tunnel, the backend's SYN-ACK).
	Reachable Stats `json:"reachable"`
	// reachable are Reachable's samples.
	reachable []time.Duration
}

// WithdrawResult is what MeasureWithdraw measured, from the deletion of
// each backend pod until its address was gone from the VIP backend map of
// every node of a cluster (Clusters) and of the whole lab (All).
type WithdrawResult struct {
	Clusters []ClusterStats `json:"clusters"`
	All      Stats          `json:"all"`
}

// ClusterStats are the figures of one cluster's nodes.
type ClusterStats struct {
	Cluster string `json:"cluster"`
	Nodes   int    `json:"nodes"`
	Stats
}

func (p *Propagation) progress(format string, args ...any) {
	if p.Progress != nil {
		fmt.Fprintf(p.Progress, format+"\n", args...)
	}
}

func (p *Propagation) clientRef() (cluster, namespace, pod string, err error) {
	parts := strings.Split(p.Client, "/")
	if len(parts) != 3 {
		return "", "", "", fmt.Errorf("client %q: want <cluster>/<namespace>/<pod>", p.Client)
	}
	if parts[0] == p.Exporter {
		return "", "", "", fmt.Errorf("client %s is in the exporting cluster %s: pick a pod of another cluster", p.Client, p.Exporter)
	}
	return parts[0], parts[1], parts[2], nil
}

func (p *Propagation) labels(role string) map[string]string {
	return map[string]string{LabelBenchmark: benchmarkName, labelRole: role}
}

func (p *Propagation) service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Labels: p.labels("service")},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: p.Port, TargetPort: intstr.FromInt32(p.TargetPort), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func (p *Propagation) export(name string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Labels: p.labels("export")}}
}

// MeasureExport creates n Services in Exporter backed by the Selector's
// pods and exports them one at a time. Each Service's own EndpointSlice
// is ready before its export is created, so what is timed is Causeway's
// part: export → broker → VIP allocation → ServiceImport and
// EndpointSlices in the client's cluster → the route agent's BPF maps →
// a TCP connect through the tunnel.
func (p *Propagation) MeasureExport(ctx context.Context, n int) (ExportResult, error) {
	cluster, namespace, podName, err := p.clientRef()
	if err != nil {
		return ExportResult{}, err
	}
	exp, err := p.Lab.Client(p.Exporter)
	if err != nil {
		return ExportResult{}, err
	}
	imp, err := p.watchClient(cluster)
	if err != nil {
		return ExportResult{}, err
	}
	pod := &corev1.Pod{}
	if err := imp.Get(ctx, client.ObjectKey{Namespace: namespace, Name: podName}, pod); err != nil {
		return ExportResult{}, fmt.Errorf("client pod %s: %w", p.Client, err)
	}
	node := pod.Spec.NodeName
	if pod.Spec.HostNetwork || node == "" {
		return ExportResult{}, fmt.Errorf("client pod %s: want a running pod that is not hostNetwork", p.Client)
	}
	clientMap, err := vip.OpenPinned(p.Lab.VIPPinDir(cluster, node))
	if err != nil {
		return ExportResult{}, fmt.Errorf("%s/%s: %w", cluster, node, err)
	}
	defer clientMap.Close()
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("%s%d", namePrefix, i))
	}
	if err := p.createServices(ctx, exp, names); err != nil {
		return ExportResult{}, err
	}
	pr, err := p.startProbe(ctx, cluster, namespace, podName)
	if err != nil {
		return ExportResult{}, err
	}
	defer pr.close()

	var imported, programmed, reachable []time.Duration
	for i, name := range names {
		w, err := imp.Watch(ctx, &mcsv1beta1.ServiceImportList{}, client.InNamespace(p.Namespace),
			client.MatchingFields{"metadata.name": name})
		if err != nil {
			return ExportResult{}, fmt.Errorf("%s: watch ServiceImport %s: %w", cluster, name, err)
		}
		start := time.Now()
		if err := exp.Create(ctx, p.export(name)); err != nil {
			w.Stop()
			return ExportResult{}, fmt.Errorf("%s: export %s: %w", p.Exporter, name, err)
		}
		vipAddr, importedAt, err := p.waitImport(ctx, w, imp, cluster, name)
		w.Stop()
		if err != nil {
			return ExportResult{}, err
		}
		key := vip.ServiceKey{VIP: vipAddr, Port: uint16(p.Port), Proto: vip.TCP}
		type mapped struct {
			at  time.Time
			err error
		}
		mapc := make(chan mapped, 1)
		go func() {
			var m mapped
			m.err = p.poll(ctx, p.Poll, fmt.Sprintf("%s/%s: backends of %s in the VIP map", cluster, node, key), func() (bool, error) {
				svc, _, err := clientMap.Service(key)
				m.at = time.Now()
				return len(svc.Backends) > 0, err
			})
			mapc <- m
		}()
		target := netip.AddrPortFrom(vipAddr, uint16(p.Port))
		reachedAt, err := pr.connect(ctx, name, target.String(), p.Timeout)
		m := <-mapc
		if err != nil {
			return ExportResult{}, fmt.Errorf("%s → VIP of %s (%s): %w", p.Client, name, target, err)
		}
		if m.err != nil {
			return ExportResult{}, m.err
		}
		imported = append(imported, importedAt.Sub(start))
		programmed = append(programmed, m.at.Sub(start))
		reachable = append(reachable, reachedAt.Sub(start))
		p.progress("export %d/%d %s: ServiceImport in %s after %v, in %s/%s's VIP map after %v, %s reachable from %s after %v",
			i+1, n, name, cluster, importedAt.Sub(start).Round(time.Millisecond),
			cluster, node, m.at.Sub(start).Round(time.Millisecond),
			target, p.Client, reachedAt.Sub(start).Round(time.Millisecond))
	}
	return ExportResult{Imported: NewStats(imported), Programmed: NewStats(programmed), Reachable: NewStats(reachable), reachable: reachable}, nil
}

// memberClients are clients of every cluster of the lab, by name.
func (p *Propagation) memberClients() (map[string]client.Client, error) {
	out := map[string]client.Client{}
	for _, name := range p.Lab.Members() {
		c, err := p.Lab.Client(name)
		if err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, nil
}

// watchClient is a client of cluster that can watch.
func (p *Propagation) watchClient(cluster string) (client.WithWatch, error) {
	rc, err := p.Lab.RESTConfig(cluster)
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(rc, client.Options{Scheme: kube.NewScheme()})
}

// createServices creates the Services in Exporter and waits until each
// works there: a ready endpoint in its EndpointSlice, and its ClusterIP
// answering a TCP connect from a pod on every node of the cluster that
// runs one (kube-proxy has programmed it: its iptables mode syncs at most
// once a second). An export is timed from a Service that already works
// in its own cluster, as a user would export it.
func (p *Propagation) createServices(ctx context.Context, c client.Client, names []string) error {
	var targets []string
	for _, name := range names {
		svc := p.service(name, p.Selector)
		if err := c.Create(ctx, svc); err != nil {
			return fmt.Errorf("%s: create service %s: %w", p.Exporter, name, err)
		}
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return fmt.Errorf("%s: service %s: ClusterIP %q: %w", p.Exporter, name, svc.Spec.ClusterIP, err)
		}
		targets = append(targets, netip.AddrPortFrom(ip, uint16(p.Port)).String())
	}
	for _, name := range names {
		if err := p.waitLocalEndpoints(ctx, c, name); err != nil {
			return err
		}
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(p.Namespace)); err != nil {
		return err
	}
	onNode := map[string]string{}
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && !pod.Spec.HostNetwork && pod.DeletionTimestamp == nil {
			onNode[pod.Spec.NodeName] = pod.Name
		}
	}
	if len(onNode) == 0 {
		return fmt.Errorf("%s: no running pod in namespace %s to check the services from", p.Exporter, p.Namespace)
	}
	for node, pod := range onNode {
		pr, err := p.startProbe(ctx, p.Exporter, p.Namespace, pod)
		if err != nil {
			return err
		}
		errs := make([]error, len(names))
		var wg sync.WaitGroup
		for i := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := pr.connect(ctx, names[i], targets[i], p.Timeout); err != nil {
					errs[i] = fmt.Errorf("%s: service %s at %s from pod %s on %s: %w", p.Exporter, names[i], targets[i], pod, node, err)
				}
			}()
		}
		wg.Wait()
		pr.close()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	p.progress("%d services created in %s, each answering at its ClusterIP on nodes %v", len(names), p.Exporter, slices.Sorted(maps.Keys(onNode)))
	return nil
}

// waitLocalEndpoints waits until the Service's own EndpointSlice in the
// exporting cluster lists a ready endpoint.
func (p *Propagation) waitLocalEndpoints(ctx context.Context, c client.Client, name string) error {
	return p.poll(ctx, 50*time.Millisecond, fmt.Sprintf("%s: ready endpoints of service %s", p.Exporter, name), func() (bool, error) {
		var list discoveryv1.EndpointSliceList
		if err := c.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			return false, err
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// waitImport returns the VIP of the ServiceImport name and when it was
// seen. The watch may end early (API server timeouts): a Get then
// catches up and a new watch continues.
func (p *Propagation) waitImport(ctx context.Context, w watch.Interface, c client.WithWatch, cluster, name string) (netip.Addr, time.Time, error) {
	deadline := time.NewTimer(p.Timeout)
	defer deadline.Stop()
	vipOf := func(si *mcsv1beta1.ServiceImport) (netip.Addr, bool) {
		for _, s := range si.Spec.IPs {
			if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				si := &mcsv1beta1.ServiceImport{}
				err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, si)
				if err == nil {
					if a, ok := vipOf(si); ok {
						return a, time.Now(), nil
					}
				} else if !apierrors.IsNotFound(err) {
					return netip.Addr{}, time.Time{}, err
				}
				if w, err = c.Watch(ctx, &mcsv1beta1.ServiceImportList{}, client.InNamespace(p.Namespace),
					client.MatchingFields{"metadata.name": name}); err != nil {
					return netip.Addr{}, time.Time{}, fmt.Errorf("%s: watch ServiceImport %s: %w", cluster, name, err)
				}
				defer w.Stop()
				continue
			}
			si, isImport := ev.Object.(*mcsv1beta1.ServiceImport)
			if !isImport || ev.Type == watch.Deleted {
				continue
			}
			if a, ok := vipOf(si); ok {
				return a, time.Now(), nil
			}
		case <-deadline.C:
			return netip.Addr{}, time.Time{}, fmt.Errorf("%s: no ServiceImport %s/%s with a VIP after %v", cluster, p.Namespace, name, p.Timeout)
		case <-ctx.Done():
			return netip.Addr{}, time.Time{}, ctx.Err()
		}
	}
}

// poll calls check every interval until it reports done, for at most
// p.Timeout.
func (p *Propagation) poll(ctx context.Context, interval time.Duration, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(p.Timeout)
	var last error
	for {
		done, err := check()
		if err == nil && done {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not after %v: %w", what, p.Timeout, last)
			}
			return fmt.Errorf("%s: not after %v", what, p.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// prober is `causeway-lab app probe` running in the client pod.
type prober struct {
	cmd     *exec.Cmd
	in      *os.File
	mu      sync.Mutex
	waiting map[string]chan string
	done    chan struct{}
}

// startProbe starts a prober in a pod.
func (p *Propagation) startProbe(ctx context.Context, cluster, namespace, pod string) (*prober, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	args := []string{"app", "probe", "--interval", "10ms", "--attempt-timeout", "1s", "--timeout", p.Timeout.String()}
	cmd, err := p.Lab.Exec(ctx, cluster, namespace, pod, p.Self, args, inR, outW, os.Stderr)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start prober in %s/%s/%s: %w", cluster, namespace, pod, err)
	}
	pr := &prober{cmd: cmd, in: inW, waiting: map[string]chan string{}, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			id, rest, _ := strings.Cut(sc.Text(), " ")
			pr.mu.Lock()
			ch := pr.waiting[id]
			delete(pr.waiting, id)
			pr.mu.Unlock()
			if ch != nil {
				ch <- rest
			}
		}
	}()
	return pr, nil
}

// connect asks the prober for the first successful connect to addr.
func (pr *prober) connect(ctx context.Context, id, addr string, timeout time.Duration) (time.Time, error) {
	ch := make(chan string, 1)
	pr.mu.Lock()
	pr.waiting[id] = ch
	pr.mu.Unlock()
	if _, err := fmt.Fprintf(pr.in, "%s %s\n", id, addr); err != nil {
		return time.Time{}, fmt.Errorf("prober: %w", err)
	}
	select {
	case line := <-ch:
		status, detail, _ := strings.Cut(line, " ")
		if status != "ok" {
			return time.Time{}, fmt.Errorf("prober: %s", detail)
		}
		ns, err := strconv.ParseInt(detail, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("prober: bad reply %q", line)
		}
		return time.Unix(0, ns), nil
	case <-pr.done:
		return time.Time{}, errors.New("prober exited")
	case <-time.After(timeout + 5*time.Second):
		return time.Time{}, fmt.Errorf("prober did not answer within %v", timeout)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func (pr *prober) close() {
	_ = pr.in.Close()
	_ = pr.cmd.Process.Kill()
	_ = pr.cmd.Wait()
	<-pr.done
}

// nodeMap is one node's pinned VIP maps.
type nodeMap struct {
	cluster, node string
	maps          *vip.Pinned
}

// openNodeMaps opens the pinned VIP maps of every node of the lab.
func (p *Propagation) openNodeMaps() ([]nodeMap, error) {
	var nodes []nodeMap
	for _, c := range p.Lab.Topology.Clusters {
		for _, n := range c.Nodes {
			pm, err := vip.OpenPinned(p.Lab.VIPPinDir(c.Name, n.Name))
			if err != nil {
				closeNodeMaps(nodes)
				return nil, fmt.Errorf("%s/%s: %w", c.Name, n.Name, err)
			}
			nodes = append(nodes, nodeMap{cluster: c.Name, node: n.Name, maps: pm})
		}
	}
	return nodes, nil
}

func closeNodeMaps(nodes []nodeMap) {
	for _, n := range nodes {
		_ = n.maps.Close()
	}
}

// MeasureWithdraw times demo step 9 ("delete the Deployment in cluster 2:
// its endpoints disappear from every cluster at once"). A Service of its
// own is exported from Exporter and from the client's cluster, each with
// its own whereami pod; for ClusterSetIP services a cluster's backend in
// the VIP maps is its Service's ClusterIP, ready while one of its pods is.
// m times: a pod is created in Exporter, its cluster's backend is awaited
// in the VIP backend map of every node of every cluster (the route
// agents' pinned maps, read directly), the pod is deleted, and the time
// until that backend is gone from each node's map is recorded. The other
// cluster's backend must stay everywhere.
func (p *Propagation) MeasureWithdraw(ctx context.Context, m int) (WithdrawResult, error) {
	steady, _, _, err := p.clientRef()
	if err != nil {
		return WithdrawResult{}, err
	}
	members, err := p.memberClients()
	if err != nil {
		return WithdrawResult{}, err
	}
	exp, ok := members[p.Exporter]
	if !ok {
		return WithdrawResult{}, fmt.Errorf("no cluster %s in the lab", p.Exporter)
	}
	sel := map[string]string{LabelBenchmark: benchmarkName, labelRole: "withdraw-backend"}
	if err := p.createPod(ctx, members[steady], steady, withdrawName+"-steady", sel); err != nil {
		return WithdrawResult{}, err
	}
	clusterIPs := map[string]netip.Addr{}
	for _, cl := range []string{p.Exporter, steady} {
		svc := p.service(withdrawName, sel)
		if err := members[cl].Create(ctx, svc); err != nil {
			return WithdrawResult{}, fmt.Errorf("%s: create service %s: %w", cl, withdrawName, err)
		}
		a, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return WithdrawResult{}, fmt.Errorf("%s: service %s: ClusterIP %q: %w", cl, withdrawName, svc.Spec.ClusterIP, err)
		}
		clusterIPs[cl] = a
		if err := members[cl].Create(ctx, p.export(withdrawName)); err != nil {
			return WithdrawResult{}, fmt.Errorf("%s: export %s: %w", cl, withdrawName, err)
		}
	}
	// What a node's map holds for a source cluster: its ClusterIP in the
	// source cluster itself, its global IP:port elsewhere under globalnet.
	removed, err := p.backendsOf(ctx, members, p.Exporter, withdrawName, clusterIPs[p.Exporter])
	if err != nil {
		return WithdrawResult{}, err
	}
	kept, err := p.backendsOf(ctx, members, steady, withdrawName, clusterIPs[steady])
	if err != nil {
		return WithdrawResult{}, err
	}

	var key vip.ServiceKey
	err = p.poll(ctx, 100*time.Millisecond, "ServiceImport "+withdrawName+" with one VIP in every cluster", func() (bool, error) {
		var vips []string
		for _, cl := range p.Lab.Members() {
			si := &mcsv1beta1.ServiceImport{}
			if err := members[cl].Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: withdrawName}, si); err != nil {
				return false, fmt.Errorf("%s: %w", cl, err)
			}
			if len(si.Spec.IPs) != 1 {
				return false, fmt.Errorf("%s: ServiceImport IPs %v", cl, si.Spec.IPs)
			}
			vips = append(vips, si.Spec.IPs[0])
		}
		for _, v := range vips[1:] {
			if v != vips[0] {
				return false, fmt.Errorf("VIPs differ between clusters: %v", vips)
			}
		}
		a, err := netip.ParseAddr(vips[0])
		key = vip.ServiceKey{VIP: a, Port: uint16(p.Port), Proto: vip.TCP}
		return err == nil, err
	})
	if err != nil {
		return WithdrawResult{}, err
	}
	nodes, err := p.openNodeMaps()
	if err != nil {
		return WithdrawResult{}, err
	}
	defer closeNodeMaps(nodes)
	inEveryMap := func(be backendsByCluster, what string) error {
		return p.poll(ctx, 20*time.Millisecond, fmt.Sprintf("%s %v of %s in every node's VIP map", what, be, key), func() (bool, error) {
			for _, n := range nodes {
				if in, err := hasBackend(n.maps, key, be[n.cluster]); err != nil || !in {
					return false, fmt.Errorf("%s/%s: in map %v, error %v", n.cluster, n.node, in, err)
				}
			}
			return true, nil
		})
	}
	if err := inEveryMap(kept, steady+"'s backend"); err != nil {
		return WithdrawResult{}, err
	}

	perCluster := map[string][]time.Duration{}
	var all []time.Duration
	for k := 0; k < m; k++ {
		name := fmt.Sprintf("%s-%d", withdrawName, k)
		if err := p.createPod(ctx, exp, p.Exporter, name, sel); err != nil {
			return WithdrawResult{}, err
		}
		if err := inEveryMap(removed, p.Exporter+"'s backend"); err != nil {
			return WithdrawResult{}, err
		}
		gone, err := p.timeRemoval(ctx, exp, name, nodes, key, removed)
		if err != nil {
			return WithdrawResult{}, err
		}
		for _, n := range nodes {
			if in, err := hasBackend(n.maps, key, kept[n.cluster]); err != nil || !in {
				return WithdrawResult{}, fmt.Errorf("%s/%s lost %s's backend %s of %s along with %s's (error %v)", n.cluster, n.node, steady, kept[n.cluster], key, p.Exporter, err)
			}
		}
		clusterMax := map[string]time.Duration{}
		var worst time.Duration
		for i, n := range nodes {
			clusterMax[n.cluster] = max(clusterMax[n.cluster], gone[i])
			worst = max(worst, gone[i])
		}
		for c, d := range clusterMax {
			perCluster[c] = append(perCluster[c], d)
		}
		all = append(all, worst)
		p.progress("removal %d/%d: pod %s deleted, %s's backend %v gone from every node's VIP map after %v",
			k+1, m, name, p.Exporter, removed, worst.Round(time.Millisecond))
	}
	res := WithdrawResult{All: NewStats(all)}
	for _, c := range p.Lab.Topology.Clusters {
		res.Clusters = append(res.Clusters, ClusterStats{Cluster: c.Name, Nodes: len(c.Nodes), Stats: NewStats(perCluster[c.Name])})
	}
	return res, nil
}

// timeRemoval deletes the pod and returns, for each node, how long after
// the deletion be was no longer in its map for key.
func (p *Propagation) timeRemoval(ctx context.Context, c client.Client, pod string, nodes []nodeMap, key vip.ServiceKey, be backendsByCluster) ([]time.Duration, error) {
	start := time.Now()
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: pod}}); err != nil {
		return nil, fmt.Errorf("%s: delete pod %s: %w", p.Exporter, pod, err)
	}
	gone := make([]time.Duration, len(nodes))
	left := len(nodes)
	deadline := start.Add(p.Timeout)
	for {
		for i, n := range nodes {
			if gone[i] != 0 {
				continue
			}
			in, err := hasBackend(n.maps, key, be[n.cluster])
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", n.cluster, n.node, err)
			}
			if !in {
				gone[i] = time.Since(start)
				left--
			}
		}
		if left == 0 {
			return gone, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("backend %s of %s still in %d node maps %v after pod %s was deleted", be, key, left, p.Timeout, pod)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(p.Poll):
		}
	}
}

// backendsByCluster is one source cluster's backend as each member's VIP
// maps hold it.
type backendsByCluster map[string]vip.Backend

// backendsOf returns what every member's VIP maps hold for source's
// export of Service name: clusterIP:port in source itself, and in the
// others, under globalnet, the pair of source's GlobalIngress (awaited).
func (p *Propagation) backendsOf(ctx context.Context, members map[string]client.Client, source, name string, clusterIP netip.Addr) (backendsByCluster, error) {
	remote := vip.Backend{Addr: clusterIP, Port: uint16(p.Port)}
	if p.Lab.Globalnet {
		err := p.poll(ctx, 20*time.Millisecond, source+"'s GlobalIngress for "+name, func() (bool, error) {
			gi := &causewayv1alpha1.GlobalIngress{}
			if err := members[source].Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, gi); err != nil {
				return false, err
			}
			ip, err := netip.ParseAddr(gi.Spec.IP)
			if err != nil || gi.Spec.ReleasedAt != nil {
				return false, fmt.Errorf("spec %+v", gi.Spec)
			}
			for _, gp := range gi.Spec.Ports {
				if gp.Port == int32(p.Port) {
					remote = vip.Backend{Addr: ip, Port: uint16(gp.GlobalPort)}
					return true, nil
				}
			}
			return false, fmt.Errorf("no global port for %d in %+v", p.Port, gi.Spec.Ports)
		})
		if err != nil {
			return nil, err
		}
	}
	out := backendsByCluster{}
	for _, c := range p.Lab.Members() {
		out[c] = remote
	}
	out[source] = vip.Backend{Addr: clusterIP, Port: uint16(p.Port)}
	return out, nil
}

func hasBackend(m *vip.Pinned, key vip.ServiceKey, be vip.Backend) (bool, error) {
	svc, _, err := m.Service(key)
	if err != nil {
		return false, err
	}
	for _, b := range svc.Backends {
		if b.AddrPort() == be.AddrPort() {
			return true, nil
		}
	}
	return false, nil
}

// createPod creates a whereami pod in cluster and waits until it is ready.
func (p *Propagation) createPod(ctx context.Context, c client.Client, cluster, name string, labels map[string]string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:  "whereami",
				Image: apps.ImageWhereami,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: p.TargetPort, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(p.TargetPort)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("%s: create pod %s: %w", cluster, name, err)
	}
	return p.poll(ctx, 100*time.Millisecond, fmt.Sprintf("%s: pod %s ready", cluster, name), func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return kube.PodReady(pod) && pod.Status.PodIP != "", nil
	})
}

// Cleanup deletes every object a Propagation run created, in every
// cluster (found by label, so leftovers of an interrupted run go too), and
// waits until they and their ServiceImports are gone.
func (p *Propagation) Cleanup(ctx context.Context) error {
	members, err := p.memberClients()
	if err != nil {
		return err
	}
	mine := []client.ListOption{client.InNamespace(p.Namespace), client.MatchingLabels{LabelBenchmark: benchmarkName}}
	// The VIPs of the benchmark's imports, to see them leave the maps
	// (an allocator may hand the same VIP to the next run).
	keys := map[vip.ServiceKey]bool{}
	for _, c := range members {
		var imports mcsv1beta1.ServiceImportList
		if err := c.List(ctx, &imports, client.InNamespace(p.Namespace)); err != nil {
			return err
		}
		for _, si := range imports.Items {
			if !strings.HasPrefix(si.Name, namePrefix) {
				continue
			}
			for _, ip := range si.Spec.IPs {
				a, err := netip.ParseAddr(ip)
				if err != nil || !a.Is4() {
					continue
				}
				for _, port := range si.Spec.Ports {
					if port.Protocol == corev1.ProtocolTCP || port.Protocol == "" {
						keys[vip.ServiceKey{VIP: a, Port: uint16(port.Port), Proto: vip.TCP}] = true
					}
				}
			}
		}
	}
	var errs []error
	for cl, c := range members {
		for _, list := range []client.ObjectList{&mcsv1beta1.ServiceExportList{}, &corev1.ServiceList{}, &corev1.PodList{}} {
			if err := c.List(ctx, list, mine...); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", cl, err))
				continue
			}
			if err := meta.EachListItem(list, func(o runtime.Object) error {
				obj := o.(client.Object)
				if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s: delete %T %s: %w", cl, obj, obj.GetName(), err)
				}
				return nil
			}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	err = p.poll(ctx, 200*time.Millisecond, "the benchmark's pods and ServiceImports gone", func() (bool, error) {
		for cl, c := range members {
			var imports mcsv1beta1.ServiceImportList
			if err := c.List(ctx, &imports, client.InNamespace(p.Namespace)); err != nil {
				return false, err
			}
			for _, si := range imports.Items {
				if strings.HasPrefix(si.Name, namePrefix) {
					return false, fmt.Errorf("%s: ServiceImport %s still there", cl, si.Name)
				}
			}
			var pods corev1.PodList
			if err := c.List(ctx, &pods, mine...); err != nil {
				return false, err
			}
			if len(pods.Items) > 0 {
				return false, fmt.Errorf("%s: %d benchmark pods still there", cl, len(pods.Items))
			}
		}
		return true, nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	nodes, err := p.openNodeMaps()
	if err != nil {
		return err
	}
	defer closeNodeMaps(nodes)
	return p.poll(ctx, 50*time.Millisecond, "the benchmark's VIPs gone from every node's map", func() (bool, error) {
		for _, n := range nodes {
			for key := range keys {
				if _, ok, err := n.maps.Service(key); err != nil || ok {
					return false, fmt.Errorf("%s/%s still has %s (error %v)", n.cluster, n.node, key, err)
				}
			}
		}
		return true, nil
	})
}
