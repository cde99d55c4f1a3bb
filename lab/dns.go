package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/lab/netlab"
)

// ImageCoreDNS is the lab image that runs the CoreDNS binary built by
// hack/k8s-binaries.sh with the cluster's Corefile.
const ImageCoreDNS = "causeway.dev/lab/coredns"

// DNSServiceIP is a cluster's DNS service address: the tenth address of
// its service CIDR, as kubeadm does.
func DNSServiceIP(serviceCIDR netip.Prefix) netip.Addr {
	a := serviceCIDR.Addr().As4()
	a[3] += 10
	return netip.AddrFrom4(a)
}

// corefile is the Corefile of a cluster's CoreDNS: stock CoreDNS serving
// cluster.local and, from ServiceImports and multicluster EndpointSlices,
// clusterset.local.
func (s *State) corefile(cluster string) (string, error) {
	cp, err := s.ControlPlane(cluster)
	if err != nil {
		return "", err
	}
	// CoreDNS runs in a node namespace and reaches the API server through
	// the kubelet's forwarder.
	kubeconfig, err := cp.KubeconfigAt("coredns", NodeAPIServer, "system:coredns", []string{"system:masters"})
	if err != nil {
		return "", err
	}
	return corefileFor(kubeconfig), nil
}

// corefileFor is the Corefile of a CoreDNS reaching its API server with
// kubeconfig. clusterset.local answers A and AAAA records of a ClusterSetIP
// import from its spec.ips (one VIP per IP family), SRV from its ports.
func corefileFor(kubeconfig string) string {
	return fmt.Sprintf(`.:53 {
    errors
    kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        multicluster clusterset.local
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
    ready 127.0.0.1:8181
}
`, kubeconfig)
}

// writeCorefiles writes <Dir>/<cluster>/Corefile for every cluster.
func (s *State) writeCorefiles() error {
	for _, c := range s.Members() {
		cf, err := s.corefile(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.controlPlaneDir(c), "Corefile"), []byte(cf), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// registerCoreDNS teaches a kubelet's registry to run ImageCoreDNS.
func (s *State) registerCoreDNS(reg *apps.Registry, cluster string) {
	reg.Register(ImageCoreDNS, func(apps.Container) (apps.Command, error) {
		return apps.Command{
			Path: filepath.Join(s.BinDir, "coredns"),
			Args: []string{"-conf", filepath.Join(s.controlPlaneDir(cluster), "Corefile")},
		}, nil
	})
}

// ImageCauseway is the image of Causeway's Helm chart (deploy/helm/causeway),
// with Causeway's binaries in /usr/local/bin.
const ImageCauseway = "ghcr.io/causeway-net/causeway"

// registerCauseway runs Pods of Causeway's image (DaemonSets and
// Deployments of the chart) with the binaries built next to
// causeway-lab: command /usr/local/bin/<daemon> runs DaemonBinary(daemon).
func (s *State) registerCauseway(reg *apps.Registry) {
	reg.RegisterBinaries(ImageCauseway, "/usr/local/bin", filepath.Dir(s.Self))
}

// CausewayNamespace holds Causeway's own objects in every cluster.
const CausewayNamespace = "causeway-system"

// SystemObjects are what every lab cluster runs besides the demo: the
// causeway-system namespace (not with --no-install: join makes it) and
// CoreDNS (host network, one replica) behind the kube-dns Service (not
// with RuntimeContainerd: no image of it).
func (s *State) SystemObjects(cluster string) []client.Object {
	c, _ := s.Topology.Cluster(cluster)
	labels := map[string]string{"k8s-app": "kube-dns"}
	objs := []client.Object{
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns", Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						HostNetwork:                   true,
						DNSPolicy:                     corev1.DNSDefault,
						TerminationGracePeriodSeconds: ptr.To[int64](2),
						Containers: []corev1.Container{{
							Name:  "coredns",
							Image: ImageCoreDNS,
							Ports: []corev1.ContainerPort{
								{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							},
							ReadinessProbe: &corev1.Probe{
								// CoreDNS's ready plugin answers once the kubernetes
								// plugin has synced.
								ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: "/ready", Port: intstr.FromInt32(8181)}},
								PeriodSeconds: 1,
							},
						}},
					},
				},
			},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-dns", Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector:  labels,
				ClusterIP: DNSServiceIP(c.ServiceCIDR).String(),
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolTCP},
				},
			},
		},
	}
	if s.containerd() { // no CoreDNS image
		objs = []client.Object{s.kubernetesEndpoints(c)}
	}
	if s.NoInstall {
		return objs
	}
	return append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CausewayNamespace}}}, objs...)
}

// kubernetesEndpoints is the EndpointSlice of the `kubernetes` Service
// in a containerd lab: a real kubelet gives pods its ClusterIP as
// KUBERNETES_SERVICE_HOST, and the API servers run without an endpoint
// reconciler (they listen on the root namespace's loopback), so the lab
// names the API server forwarders of the cluster's nodes (port 6443 of
// every node address; link-local netlab.APIAddress is refused in an
// EndpointSlice).
func (s *State) kubernetesEndpoints(c netlab.Cluster) *discoveryv1.EndpointSlice {
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "lab.causeway.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](kubelet.APIServerPort),
			Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, n := range c.Nodes {
		eps.Endpoints = append(eps.Endpoints, discoveryv1.Endpoint{Addresses: []string{n.Address.Addr().String()}})
	}
	return eps
}

// resolvConf writes (and returns the path of) the resolv.conf of pods in
// a cluster's namespace: the cluster's DNS service and the usual search
// path.
func (s *State) resolvConf(cluster, namespace string) (string, error) {
	c, ok := s.Topology.Cluster(cluster)
	if !ok {
		return "", fmt.Errorf("no cluster %q", cluster)
	}
	dir := filepath.Join(s.Dir, "dns", cluster)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	search := []string{namespace + ".svc.cluster.local", "svc.cluster.local", "cluster.local"}
	body := fmt.Sprintf("nameserver %s\nsearch %s\noptions ndots:5\n", DNSServiceIP(c.ServiceCIDR), strings.Join(search, " "))
	path := filepath.Join(dir, namespace+".resolv.conf")
	return path, os.WriteFile(path, []byte(body), 0o644)
}
