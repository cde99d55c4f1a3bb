package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/causeway-net/causeway/lab/netlab"
)

// healthCheck is one node component's health endpoint, served on the
// node's loopback.
type healthCheck struct {
	cluster, node, unit string
	url                 string
}

// healthChecks lists what waitHealthy probes: every node's kube-proxy
// (the Causeway daemons are Pods with probes of their own: waitCauseway).
func (s *State) healthChecks() []healthCheck {
	var out []healthCheck
	for _, c := range s.Topology.Clusters {
		for _, n := range c.Nodes {
			out = append(out, healthCheck{c.Name, n.Name, "kube-proxy", "http://127.0.0.1:10256/healthz"})
		}
	}
	return out
}

// waitHealthy waits until every component of healthChecks answers 200.
// `lab up` never says the lab is up while one of them is failing: it
// returns an error naming each one with the last lines of its log.
func (s *State) waitHealthy(ctx context.Context, h *netlab.Host, timeout time.Duration) error {
	checks := s.healthChecks()
	failing := map[int]string{}
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		clear(failing)
		for i, c := range checks {
			if err := probe(ctx, h, h.Names().Node(c.cluster, c.node), c.url); err != nil {
				failing[i] = err.Error()
			}
		}
		return len(failing) == 0, nil
	})
	if len(failing) == 0 {
		return nil
	}
	var b strings.Builder
	for i, c := range checks {
		msg, ok := failing[i]
		if !ok {
			continue
		}
		log := filepath.Join(s.LogDir(), c.cluster, c.node, c.unit+".log")
		fmt.Fprintf(&b, "\n%s/%s/%s not healthy after %v (%s); last lines of %s:\n%s", c.cluster, c.node, c.unit, timeout, msg, log, lastLines(log, 5))
	}
	return fmt.Errorf("lab components failing:%s", b.String())
}

// probe GETs url from inside the node namespace ns.
func probe(ctx context.Context, h *netlab.Host, ns, url string) error {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := h.Do(ns, func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// lastLines returns the last n lines of the file at path.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		if len(l) > 400 {
			l = l[:400] + "…"
		}
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}
