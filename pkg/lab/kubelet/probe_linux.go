package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// startProber runs the container's readiness probe until the process
// ends; without one the container is ready once started. Exec and gRPC
// probes are not supported: such containers count as ready once started
// (a warning is logged).
func (w *worker) startProber(pod *corev1.Pod, spec corev1.Container, c *ctr) {
	p := spec.ReadinessProbe
	if p == nil || (p.HTTPGet == nil && p.TCPSocket == nil) {
		if p != nil {
			w.k.log.Warn("readiness probe kind not supported; container counts as ready once started", "pod", w.key, "container", spec.Name)
		}
		c.ready = true
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	c.stopProbe = cancel
	gen, name, podIP := c.gen, spec.Name, w.podIP()
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	successes, failures := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	if p.FailureThreshold == 0 {
		failures = 3
	}
	go func() {
		delay := time.NewTimer(time.Duration(p.InitialDelaySeconds) * time.Second)
		select {
		case <-ctx.Done():
			delay.Stop()
			return
		case <-delay.C:
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		ready := false
		var ok, bad int32
		for {
			pctx, pcancel := context.WithTimeout(ctx, timeout)
			err := w.k.probe(pctx, p, podIP, spec.Ports)
			pcancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				ok, bad = ok+1, 0
				if !ready && ok >= successes {
					ready = true
					w.send(event{container: name, gen: gen, ready: ptrTo(true)})
				}
			} else {
				ok, bad = 0, bad+1
				w.k.log.Log(ctx, slog.LevelDebug, "readiness probe failed", "pod", w.key, "container", name, "err", err)
				if ready && bad >= failures {
					ready = false
					w.send(event{container: name, gen: gen, ready: ptrTo(false)})
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// probe runs one httpGet or tcpSocket probe from the node namespace.
func (k *Kubelet) probe(ctx context.Context, p *corev1.Probe, podIP string, ports []corev1.ContainerPort) error {
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := resolvePort(g.Port, ports)
		if err != nil {
			return err
		}
		host := g.Host
		if host == "" {
			host = podIP
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "kube-probe/lab")
		for _, h := range g.HTTPHeaders {
			if strings.EqualFold(h.Name, "Host") {
				req.Host = h.Value
				continue
			}
			req.Header.Add(h.Name, h.Value)
		}
		resp, err := (&http.Client{Transport: k.probeTr}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe %s: status %d", url, resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, ports)
		if err != nil {
			return err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		c, err := k.dialFromNode(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return c.Close()
	}
	return fmt.Errorf("unsupported probe")
}

// resolvePort maps a probe port (number or container port name) to a
// number.
func resolvePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("probe port %d out of range", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n < 65536 {
		return n, nil
	}
	return 0, fmt.Errorf("probe port %q is no container port", p.StrVal)
}

// containerEnv is the container's environment: literal values (with
// $(VAR) references to earlier variables expanded) and the downward-API
// fields a pod commonly asks for. Other sources (ConfigMaps, Secrets,
// resource fields) are not supported and are left out, with a warning.
func containerEnv(pod *corev1.Pod, c corev1.Container, podIP, hostIP string, log *slog.Logger) []string {
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+expand(e.Value, envMap(env)))
			continue
		}
		if e.ValueFrom.FieldRef == nil {
			log.Warn("env source not supported; variable left out", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "env", e.Name)
			continue
		}
		var v string
		switch e.ValueFrom.FieldRef.FieldPath {
		case "metadata.name":
			v = pod.Name
		case "metadata.namespace":
			v = pod.Namespace
		case "metadata.uid":
			v = string(pod.UID)
		case "spec.nodeName":
			v = pod.Spec.NodeName
		case "spec.serviceAccountName":
			v = pod.Spec.ServiceAccountName
		case "status.podIP", "status.podIPs":
			v = podIP
		case "status.hostIP", "status.hostIPs":
			v = hostIP
		default:
			log.Warn("env field not supported; variable left out", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "env", e.Name, "field", e.ValueFrom.FieldRef.FieldPath)
			continue
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

func parseAddr(s string) (netip.Addr, error) { return netip.ParseAddr(s) }

// envMap maps the names of "NAME=value" entries to their values (a later
// entry wins).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}

// expand replaces $(NAME) in s by the value of variable NAME, as the
// kubelet does in a container's command, args and env values: "$$" is a
// literal "$", and a reference to an undefined variable (or an unclosed
// one) stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := vars[s[i+2:i+2+end]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += len(ref) - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
