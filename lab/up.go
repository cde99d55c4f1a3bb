package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/kube"
)

// progress prints timed progress lines.
type progress struct {
	out   io.Writer
	start time.Time
}

func (p *progress) say(format string, args ...any) {
	fmt.Fprintf(p.out, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// Up brings the lab up, or repairs it when it is up already: the network
// is re-applied, a missing supervisor is restarted, the chart (with the
// CRDs) and the demo are re-applied, and Up waits until every node, demo
// pod and chart Pod is ready. With cfg.NoInstall it sets up neither the
// broker nor Causeway (JoinCommands say how to, as a user does).
func Up(ctx context.Context, cfg Config, out io.Writer) (*State, error) {
	p := &progress{out: out, start: time.Now()}
	top, err := cfg.Topology()
	if err != nil {
		return nil, err
	}
	if cfg.Cable == "" {
		cfg.Cable = DefaultCable
	}
	if !slices.Contains(cables, cfg.Cable) {
		return nil, fmt.Errorf("--cable %q: want wireguard, ipsec or vxlan", cfg.Cable)
	}
	switch cfg.Runtime {
	case "", RuntimeLab:
		cfg.Runtime = ""
	case RuntimeContainerd:
		if cfg.IPFamily == IPFamilyDual {
			return nil, fmt.Errorf("--runtime containerd: IPv4 clusters only (the nodes' CNI network is IPv4)")
		}
	default:
		return nil, fmt.Errorf("--runtime %q: want %s or %s", cfg.Runtime, RuntimeLab, RuntimeContainerd)
	}
	st := &State{Dir: cfg.Dir, Prefix: cfg.Prefix, BinDir: cfg.BinDir, Self: cfg.Self, Topology: top, Demo: !cfg.NoDemo,
		Cable: cfg.Cable, Globalnet: !cfg.NoGlobalnet, NoInstall: cfg.NoInstall, Runtime: cfg.Runtime,
		Versions: map[string]string{"kubernetes": controlplane.KubernetesVersion, "etcd": controlplane.EtcdVersion}}
	if st.containerd() {
		st.ContainerdDir = cfg.ContainerdDir
		st.Versions["containerd"] = ContainerdVersion
	}
	if missing := st.MissingDaemons(); len(missing) > 0 {
		return nil, fmt.Errorf("no %s next to %s: the lab's kubelets run the chart's Pods with the binaries there (`make build` puts every binary in bin/)",
			strings.Join(missing, ", "), st.Self)
	}
	old, err := Load(cfg.Dir)
	if err == nil {
		if !reflect.DeepEqual(old.Topology, st.Topology) || old.CableDriver() != st.CableDriver() || old.Globalnet != st.Globalnet ||
			old.NoInstall != st.NoInstall || old.RuntimeName() != st.RuntimeName() {
			return nil, fmt.Errorf("a lab of another shape is up in %s: run `causeway-lab down` first", cfg.Dir)
		}
		p.say("lab already up in %s: checking and repairing", cfg.Dir)
	} else if errors.Is(err, ErrNoLab) {
		old = nil
	} else {
		return nil, err
	}
	if st.containerd() {
		// Before lab.json: what the host had is recorded before the
		// first kubelet changes it, and `lab down` finds the record.
		if err := st.prepareContainerd(old); err != nil {
			return nil, err
		}
		p.say("containerd runtime: images %s and %s written to %s", st.causewayImage(), st.labImage(), st.labImagesTarball())
	}
	if err := st.save(); err != nil {
		return nil, err
	}
	if st.NoInstall {
		if err := os.MkdirAll(st.JoinDir(), 0o700); err != nil {
			return nil, err
		}
	}

	h, err := st.Host()
	if err != nil {
		return nil, err
	}
	if err := h.Apply(top); err != nil {
		return nil, fmt.Errorf("build the lab network: %w", err)
	}
	nodes := 0
	for _, c := range top.Clusters {
		nodes += len(c.Nodes)
	}
	p.say("network: %d clusters, %d nodes, WAN %s (namespaces %s*), %s gateways", len(top.Clusters), nodes, top.WAN, cfg.Prefix, st.Cable)

	if err := st.mountBPFFS(); err != nil {
		return nil, err
	}
	// Certificates and kubeconfigs exist before the supervisor starts, so
	// the supervisor only reads them.
	units, err := st.Units(h)
	if err != nil {
		return nil, err
	}
	if st.supervisorStale(units) {
		p.say("the lab's processes changed (new binaries or units): restarting the supervisor")
		if err := controlplane.StopPIDFile(st.supervisorPID(), 30*time.Second); err != nil {
			return nil, err
		}
	}
	started, err := st.ensureSupervisor(h)
	if err != nil {
		return nil, err
	}
	if started {
		p.say("supervisor started (logs in %s)", st.LogDir())
	}

	clients, err := st.waitControlPlanes(ctx)
	if err != nil {
		return nil, err
	}
	p.say("control planes ready: broker, %s", strings.Join(st.Members(), ", "))

	if !st.NoInstall {
		if err := st.install(ctx, p); err != nil {
			return nil, err
		}
	}

	if err := st.waitNodes(ctx, clients); err != nil {
		return nil, err
	}
	p.say("nodes ready: %d", nodes)

	if err := st.writeCorefiles(); err != nil {
		return nil, err
	}
	if err := st.deploy(ctx, clients); err != nil {
		return nil, err
	}
	if st.containerd() {
		p.say("no CoreDNS with --runtime containerd")
	} else if st.NoInstall {
		// Its clusterset.local zone watches ServiceImports: it syncs,
		// and is Ready, once join has installed the MCS API's CRDs.
		p.say("CoreDNS deployed: Ready once join installs the MCS API's CRDs")
	} else {
		if err := st.waitPods(ctx, clients, "kube-system", func(string) int { return 1 }); err != nil {
			return nil, err
		}
		p.say("CoreDNS ready (cluster.local, clusterset.local)")
	}
	if st.Demo {
		if err := st.waitPods(ctx, clients, DemoNamespace, st.demoPods); err != nil {
			return nil, err
		}
		p.say("demo ready: whereami in %s, a client pod in every cluster", strings.Join(st.demoServerClusters(), " and "))
	}
	if err := st.waitHealthy(ctx, h, 2*time.Minute); err != nil {
		return nil, err
	}
	p.say("healthy: kube-proxy of every node")
	if st.NoInstall {
		p.say("Causeway not installed (--no-install)")
		return st, nil
	}
	if err := st.waitCauseway(ctx, clients, 2*time.Minute); err != nil {
		return nil, err
	}
	p.say("Causeway ready: the chart's gateway, route agent and MCS controller Pods")
	return st, nil
}

// install sets the broker up and installs Causeway into every cluster
// the way `causewayctl deploy-broker` and `join` do.
func (s *State) install(ctx context.Context, p *progress) error {
	ids, err := s.joinBroker(ctx)
	if err != nil {
		return err
	}
	p.say("broker: CRDs, ClusterSet policy, admission policies and quotas; clusters joined (namespace and identity each)")
	if err := s.installCauseway(ctx, ids); err != nil {
		return err
	}
	p.say("Causeway installed in every cluster like `causewayctl join` does: the CRDs and the Helm chart (identities, DaemonSets, Deployment)")
	return nil
}

// ensureSupervisor starts the supervisor unless one is running.
func (s *State) ensureSupervisor(h *netlab.Host) (bool, error) {
	if pid, ok := s.supervisorRunning(); ok && pid > 0 {
		return false, nil
	}
	cmd, err := h.Start(netlab.Process{
		Cgroup:  h.Cgroups().Control(),
		Path:    s.Self,
		Args:    []string{"supervise", "--dir", s.Dir},
		LogPath: filepath.Join(s.LogDir(), "supervisor.log"),
		Setsid:  true,
	})
	if err != nil {
		return false, fmt.Errorf("start the lab supervisor: %w", err)
	}
	if err := os.WriteFile(s.supervisorPID(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return false, err
	}
	// The supervisor outlives this command: do not wait for it, but let
	// the runtime release it.
	_ = cmd.Process.Release()
	return true, nil
}

// supervisorStale reports whether a running supervisor runs another set
// of units than the lab now needs.
func (s *State) supervisorStale(units []Unit) bool {
	if _, ok := s.supervisorRunning(); !ok {
		return false
	}
	running, err := s.Status()
	if err != nil || len(running) != len(units) {
		return err == nil
	}
	for i, u := range units {
		if running[i].Name != u.Name || running[i].Spec != u.Spec {
			return true
		}
	}
	return false
}

// supervisorRunning reports the supervisor's PID when it is alive.
func (s *State) supervisorRunning() (int, bool) {
	b, err := os.ReadFile(s.supervisorPID())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "supervise") {
		return 0, false
	}
	return pid, true
}

// waitControlPlanes waits for every API server and returns admin clients
// by control-plane name.
func (s *State) waitControlPlanes(ctx context.Context) (map[string]client.Client, error) {
	clients := map[string]client.Client{}
	var mu sync.Mutex
	err := forEach(append([]string{"broker"}, s.Members()...), func(name string) error {
		cp, err := s.ControlPlane(name)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if err := cp.WaitReady(wctx); err != nil {
			return fmt.Errorf("%w (logs: %s)", err, filepath.Join(cp.Dir(), "logs"))
		}
		rc, err := cp.RESTConfig()
		if err != nil {
			return err
		}
		cl, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			return err
		}
		mu.Lock()
		clients[name] = cl
		mu.Unlock()
		return nil
	})
	return clients, err
}

// waitNodes waits until every lab node is registered and Ready.
func (s *State) waitNodes(ctx context.Context, clients map[string]client.Client) error {
	return forEach(s.Members(), func(name string) error {
		c, _ := s.Topology.Cluster(name)
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, n := range c.Nodes {
				node := &corev1.Node{}
				if err := clients[name].Get(ctx, client.ObjectKey{Name: s.NodeName(name, n.Name)}, node); err != nil {
					last = err.Error()
					return false, nil
				}
				if !nodeReady(node) {
					last = "node " + node.Name + " not Ready"
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("cluster %s: nodes not ready (%s); see %s: %w", name, last, filepath.Join(s.LogDir(), name), err)
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// forEach runs f for every name in parallel and joins the errors.
func forEach(names []string, f func(string) error) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
