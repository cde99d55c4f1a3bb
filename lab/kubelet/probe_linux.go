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

// startProber runs the container's readiness and liveness probes until
// the process ends; without a readiness probe the container is ready once
// started. Exec and gRPC probes are not supported: such a readiness probe
// counts as passing once started, such a liveness probe never fails (a
// warning is logged for both).
func (w *worker) startProber(pod *corev1.Pod, spec corev1.Container, c *ctr) {
	ctx, cancel := context.WithCancel(w.ctx)
	c.stopProbe = cancel
	gen, name, podIP := c.gen, spec.Name, w.podIP()
	supported := func(kind string, p *corev1.Probe) bool {
		if p == nil {
			return false
		}
		if p.HTTPGet == nil && p.TCPSocket == nil {
			w.k.log.Warn(kind+" probe kind not supported; ignored", "pod", w.key, "container", name)
			return false
		}
		return true
	}
	if supported("readiness", spec.ReadinessProbe) {
		go w.k.runProbe(ctx, spec.ReadinessProbe, podIP, spec.Ports, func(ok bool) {
			w.send(event{container: name, gen: gen, ready: ptrTo(ok)})
		}, w.key, name)
	} else {
		c.ready = true
	}
	if supported("liveness", spec.LivenessProbe) {
		go w.k.runProbe(ctx, spec.LivenessProbe, podIP, spec.Ports, func(ok bool) {
			if !ok {
				w.send(event{container: name, gen: gen, unhealthy: true})
			}
		}, w.key, name)
	}
}

// runProbe probes until ctx is done, honouring the probe's initial delay,
// period, timeout and thresholds: it calls changed(true) when
// successThreshold successes in a row are reached and changed(false) when
// failureThreshold failures in a row are (once per streak each).
func (k *Kubelet) runProbe(ctx context.Context, p *corev1.Probe, podIP string, ports []corev1.ContainerPort, changed func(bool), pod, container string) {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	successes, failures := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	if p.FailureThreshold == 0 {
		failures = 3
	}
	delay := time.NewTimer(time.Duration(p.InitialDelaySeconds) * time.Second)
	select {
	case <-ctx.Done():
		delay.Stop()
		return
	case <-delay.C:
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	var ok, bad int32
	for {
		pctx, pcancel := context.WithTimeout(ctx, timeout)
		err := k.probe(pctx, p, podIP, ports)
		pcancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			ok, bad = ok+1, 0
			if ok == successes {
				changed(true)
			}
		} else {
			ok, bad = 0, bad+1
			k.log.Log(ctx, slog.LevelDebug, "probe failed", "pod", pod, "container", container, "err", err)
			if bad == failures {
				changed(false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
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

func parseAddr(s string) (netip.Addr, error) { return netip.ParseAddr(s) }
