package e2e

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// checkHeadlessHostnames: a headless service of c1 whose pod has a
// hostname (as a StatefulSet's pods do) resolves in c3 by the names the
// MCS DNS specification gives it, served by stock CoreDNS from our
// EndpointSlices: <hostname>.<clusterid>.<svc>.<ns>.svc.clusterset.local
// to the pod, and SRV _<port>._<proto>.<svc>.<ns>.svc.clusterset.local
// to that name and the port. The ClusterSetIP service whereami gets its
// SRV record pointing at its clusterset name.
func (l *Lab) checkHeadlessHostnames(ctx context.Context) {
	l.t.Helper()
	c1 := l.Client("c1")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Hostname: "web-0", Subdomain: "web", Containers: []corev1.Container{{
			Name: "web", Image: "causeway.dev/lab/whereami", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
	}
	for _, o := range []client.Object{svc, pod} {
		if err := c1.Create(ctx, o); err != nil {
			l.t.Fatal(err)
		}
	}
	if out, err := l.causewayctl("export", "demo/web", "--cluster", "c1"); err != nil {
		l.t.Fatalf("export demo/web: %v\n%s", err, out)
	}
	var podIP string
	waitFor(l.t, "web-0 running with an IP", func() error {
		if err := c1.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if podIP = pod.Status.PodIP; podIP == "" {
			return fmt.Errorf("web-0 has no IP yet (phase %s)", pod.Status.Phase)
		}
		return nil
	})
	globalIP := l.globalPodIPs(ctx, "c1", "demo", "web", []string{podIP})[0]
	for _, q := range []struct{ args, want string }{
		{"web-0.c1.web.demo.svc.clusterset.local", globalIP},
		{"web.demo.svc.clusterset.local", globalIP},
		{"SRV _http._tcp.web.demo.svc.clusterset.local", "8080 web-0.c1.web.demo.svc.clusterset.local."},
		{"SRV _http._tcp.whereami.demo.svc.clusterset.local", "80 whereami.demo.svc.clusterset.local."},
	} {
		waitFor(l.t, "dig "+q.args+" in c3", func() error {
			args := append([]string{"dig", "+short"}, strings.Fields(q.args)...)
			out, err := l.Exec("c3/demo/client", args...)
			if err != nil {
				return fmt.Errorf("dig: %v: %s", err, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasSuffix(line, q.want) {
					return nil
				}
			}
			return fmt.Errorf("got %q, want a record ending in %q", out, q.want)
		})
	}
	// A pod of c2 (whose pod CIDR is c1's) reaches web-0 by its per-pod
	// clusterset name.
	ids := l.curlWhereami("c2/demo/client", "http://web-0.c1.web.demo.svc.clusterset.local:8080", []string{"web-0"}, 60)
	if id, ok := ids["web-0"]; ok && id.Cluster != "c1" {
		l.t.Errorf("web-0.c1 answered from cluster %q", id.Cluster)
	}
}
