package ctl

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/causeway-net/causeway/pkg/kube"
)

// gatherGroups are the API groups whose every kind gather saves: Causeway's,
// the Multi-Cluster Services API's and the About API's.
var gatherGroups = []string{"causeway.dev", "multicluster.x-k8s.io", "about.k8s.io"}

func newGatherCommand() *cobra.Command {
	cs := &clusterSetFlags{}
	var output, brokerKubeconfig string
	cmd := &cobra.Command{
		Use:   "gather",
		Short: "Write a support archive: every node's view, every daemon's logs and metrics, Causeway's objects and versions of every cluster",
		Long: `gather collects, from every cluster of the ClusterSet, into one .tar.gz:

  nodes/<cluster>/<node>.json        each node's view (route-agent inspect, as show node -o json)
  logs/<cluster>/<pod>/<container>.log   the logs of every Pod in causeway-system
  metrics/<cluster>/<pod>.txt        each daemon's Prometheus metrics (<daemon> metrics in its Pod)
  objects/<cluster>/<kind>.yaml      every object of Causeway's, the MCS API's and the About API's
                                     kinds, the multicluster EndpointSlices, causeway-system's
                                     Pods, DaemonSets, Deployments and Events, and the Nodes
  versions.yaml                      causewayctl's version, each API server's and each Pod's images
  errors.txt                         what could not be collected, and why

With --broker-kubeconfig, the broker's objects of those kinds as well
(objects/broker/). Everything is read through the Kubernetes API (node
views and metrics through pods/exec); nothing is changed. Secrets are
never collected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			if output == "" {
				output = "causeway-gather-" + time.Now().UTC().Format("20060102-150405") + ".tar.gz"
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			g := newGatherArchive(f)
			ctx := cmd.Context()
			versions := map[string]any{"causewayctl": ctlVersion()}
			for _, c := range clusters {
				versions[c.Name] = g.cluster(ctx, c)
			}
			if brokerKubeconfig != "" {
				rc, err := clientcmd.BuildConfigFromFlags("", brokerKubeconfig)
				if err == nil {
					var bc client.Client
					if bc, err = client.New(rc, client.Options{Scheme: kube.NewScheme()}); err == nil {
						g.objects(ctx, "broker", bc)
					}
				}
				g.fail("broker", err)
			}
			g.yaml("versions.yaml", versions)
			g.close()
			if err := f.Close(); err != nil && g.err == nil {
				g.err = err
			}
			if g.err != nil {
				return fmt.Errorf("write %s: %w", output, g.err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d files, %d things could not be collected (errors.txt)\n", output, g.files, len(g.errors))
			return nil
		},
	}
	cs.addFlags(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "archive to write (default causeway-gather-<UTC time>.tar.gz)")
	cmd.Flags().StringVar(&brokerKubeconfig, "broker-kubeconfig", "", "also collect the broker's objects with this kubeconfig")
	return cmd
}

// gatherArchive is the archive being written; a failure to collect one
// thing is recorded in errors.txt, a failure to write ends the archive.
type gatherArchive struct {
	gz     *gzip.Writer
	tw     *tar.Writer
	files  int
	errors []string
	err    error // write error
}

func newGatherArchive(w io.Writer) *gatherArchive {
	gz := gzip.NewWriter(w)
	return &gatherArchive{gz: gz, tw: tar.NewWriter(gz)}
}

func (g *gatherArchive) fail(what string, err error) {
	if err != nil {
		g.errors = append(g.errors, what+": "+err.Error())
	}
}

func (g *gatherArchive) file(name string, data []byte) {
	if g.err != nil {
		return
	}
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}
	if g.err = g.tw.WriteHeader(hdr); g.err == nil {
		_, g.err = g.tw.Write(data)
		g.files++
	}
}

func (g *gatherArchive) yaml(name string, v any) {
	b, err := yaml.Marshal(v)
	if err != nil {
		g.fail(name, err)
		return
	}
	g.file(name, b)
}

func (g *gatherArchive) close() {
	g.file("errors.txt", []byte(strings.Join(g.errors, "\n")+"\n"))
	if err := g.tw.Close(); err != nil && g.err == nil {
		g.err = err
	}
	if err := g.gz.Close(); err != nil && g.err == nil {
		g.err = err
	}
}

// cluster collects one member cluster and returns its versions.
func (g *gatherArchive) cluster(ctx context.Context, c memberCluster) map[string]any {
	versions := map[string]any{}
	if dc, err := discovery.NewDiscoveryClientForConfig(c.Config); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			versions["apiServer"] = v.GitVersion
		} else {
			g.fail(c.Name+": server version", err)
		}
	}
	nodes, err := selectNodes(ctx, []memberCluster{c}, "")
	g.fail(c.Name+": route agents", err)
	for _, n := range nodes {
		v, err := n.inspect(ctx)
		if err != nil {
			g.fail(n.String()+": node view", err)
			continue
		}
		b, err := json.MarshalIndent(v, "", "  ")
		g.fail(n.String()+": node view", err)
		g.file(path.Join("nodes", c.Name, n.Node+".json"), b)
	}
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(gwNamespace)); err != nil {
		g.fail(c.Name+": pods", err)
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		g.fail(c.Name+": client", err)
		return versions
	}
	images := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, ct := range p.Spec.Containers {
			images[p.Name+"/"+ct.Name] = ct.Image
			logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ct.Name}).DoRaw(ctx)
			g.fail(fmt.Sprintf("%s: logs of %s/%s", c.Name, p.Name, ct.Name), err)
			if err == nil {
				g.file(path.Join("logs", c.Name, p.Name, ct.Name+".log"), logs)
			}
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers[0].Command) == 0 {
			continue
		}
		ct := p.Spec.Containers[0]
		metricsCmd := []string{ct.Command[0], "metrics"}
		for _, a := range ct.Args {
			if strings.HasPrefix(a, "--metrics-addr=") {
				metricsCmd = append(metricsCmd, a)
			}
		}
		m, err := execIn(ctx, c, p, ct.Name, metricsCmd)
		g.fail(fmt.Sprintf("%s: metrics of %s", c.Name, p.Name), err)
		if err == nil {
			g.file(path.Join("metrics", c.Name, p.Name+".txt"), m)
		}
	}
	versions["images"] = images
	g.objects(ctx, c.Name, c.Client)
	return versions
}

// objects saves the kinds of gatherGroups, the multicluster
// EndpointSlices, causeway-system's workloads and Events, and the Nodes.
func (g *gatherArchive) objects(ctx context.Context, cluster string, c client.Client) {
	scheme := kube.NewScheme()
	var kinds []schema.GroupVersionKind
	for gvk := range scheme.AllKnownTypes() {
		if slices.Contains(gatherGroups, gvk.Group) && strings.HasSuffix(gvk.Kind, "List") {
			kinds = append(kinds, gvk)
		}
	}
	for _, k := range []string{"PodList", "EventList"} {
		kinds = append(kinds, schema.GroupVersionKind{Version: "v1", Kind: k})
	}
	kinds = append(kinds,
		schema.GroupVersionKind{Version: "v1", Kind: "NodeList"},
		schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSetList"},
		schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DeploymentList"},
		schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSliceList"})
	namespaced := map[string]bool{"PodList": true, "EventList": true, "DaemonSetList": true, "DeploymentList": true}
	for _, gvk := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		var opts []client.ListOption
		if namespaced[gvk.Kind] && gvk.Group != "causeway.dev" {
			opts = append(opts, client.InNamespace(gwNamespace))
		}
		if gvk.Kind == "EndpointSliceList" {
			opts = append(opts, client.HasLabels{"multicluster.kubernetes.io/service-name"})
		}
		name := strings.TrimSuffix(gvk.Kind, "List")
		if gvk.Group != "" {
			name += "." + gvk.Version + "." + gvk.Group
		}
		err := c.List(ctx, list, opts...)
		if meta.IsNoMatchError(err) {
			continue // a kind or version the cluster does not serve
		}
		if err != nil {
			g.fail(fmt.Sprintf("%s: list %s", cluster, name), err)
			continue
		}
		if len(list.Items) > 0 {
			g.yaml(path.Join("objects", cluster, name+".yaml"), list.UnstructuredContent())
		}
	}
}
