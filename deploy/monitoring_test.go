package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/cable/drivers"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/gateway"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	mcscontroller "github.com/causeway-net/causeway/pkg/mcs/controller"
	"github.com/causeway-net/causeway/pkg/routeagent"
	"github.com/causeway-net/causeway/pkg/vip"
)

// monitoringValues turn every part of monitoring on, with globalnet and
// the host-network daemons' metrics on the node's address.
func monitoringValues() map[string]any {
	v := valueSets()["defaults"]
	v["globalnet"] = map[string]any{"enabled": true}
	v["gateway"] = map[string]any{"metricsBind": "node"}
	v["routeAgent"] = map[string]any{"metricsBind": "node"}
	v["monitoring"] = map[string]any{
		"podMonitors":      map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
		"grafanaDashboard": map[string]any{"enabled": true},
	}
	return v
}

// metricSet is what the daemons register: every metric name, and which
// of them are histograms or summaries (exposed as _bucket, _sum, _count).
type metricSet struct {
	names, histograms map[string]bool
}

// has reports whether a series name a query selects is exposed.
func (s metricSet) has(name string) bool {
	if s.names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && s.histograms[base] {
			return true
		}
	}
	return false
}

// noVIPTable is an empty vip.Table: the route agent's VIP metrics only
// need one to describe themselves.
type noVIPTable struct{}

func (noVIPTable) Set(context.Context, map[vip.ServiceKey]vip.Service) error { return nil }
func (noVIPTable) Limits() vip.Limits                                        { return vip.Limits{} }
func (noVIPTable) Usage() vip.Limits                                         { return vip.Limits{} }
func (noVIPTable) Close() error                                              { return nil }

// recorder registers on a registry and remembers the collectors, so the
// kind of each (histogram or not) is known without any observation.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// descNames are the metric names c describes.
func descNames(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var out []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		out = append(out, m[1])
	}
	return out
}

// registeredMetrics builds each daemon's registry as the daemon does
// (pkg/daemon's, then the component's constructors) and collects what
// they describe. The controllers' constructors ask an API server how
// their cached kinds are scoped: a real one, kc.
func registeredMetrics(t *testing.T, kc *kubetest.Cluster) metricSet {
	t.Helper()
	set := metricSet{names: map[string]bool{}, histograms: map[string]bool{}}
	api := kc.Config
	log := slog.New(slog.DiscardHandler)
	builds := map[string]func(prometheus.Registerer) error{
		"gateway": func(reg prometheus.Registerer) error {
			_, err := gateway.New(gateway.Config{ClusterID: "c1", NodeName: "n1",
				PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
				PublicIP: netip.MustParseAddr("192.0.2.10"), Port: 4500, CableDriver: "wireguard", TunnelDevice: "cw-gw",
				Globalnet: true, Local: api, Broker: api, Drivers: drivers.Registry(), Metrics: reg, Log: log})
			return err
		},
		"route-agent": func(reg prometheus.Registerer) error {
			routeagent.NewMetrics(reg)
			routeagent.NewVIPMetrics(reg, noVIPTable{})
			return nil
		},
		"mcs-controller": func(reg prometheus.Registerer) error {
			_, err := mcscontroller.New(api, api, mcscontroller.Config{ClusterID: "c1", Metrics: reg, Log: log})
			return err
		},
		"globalnet": func(reg prometheus.Registerer) error {
			_, err := globalnetcontroller.New(api, globalnetcontroller.Config{ClusterID: "c1", Metrics: reg, Log: log})
			return err
		},
	}
	for name, build := range builds {
		reg := daemon.NewRegistry()
		rec := &recorder{Registerer: reg}
		if err := build(rec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range descNames(t, reg) {
			set.names[n] = true
		}
		for _, c := range rec.collectors {
			switch c.(type) {
			case prometheus.Histogram, *prometheus.HistogramVec, prometheus.Summary, *prometheus.SummaryVec:
				for _, n := range descNames(t, c) {
					set.histograms[n] = true
				}
			}
		}
		// The runtime's and process's collectors: their families carry
		// their types.
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: gather: %v", name, err)
		}
		for _, mf := range mfs {
			if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
				set.histograms[mf.GetName()] = true
			}
		}
	}
	return set
}

// grafanaVars are the variables Grafana replaces in a query before
// Prometheus sees it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "3h")

// unknownMetrics parses expr with the PromQL parser and returns the
// metric names it selects that set does not have; a selector without a
// metric name is an error.
func unknownMetrics(expr string, set metricSet) ([]string, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var unknown []string
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("%q: selector %s names no metric", expr, vs))
		case !set.has(name):
			unknown = append(unknown, name)
		}
		return nil
	})
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return unknown, nil
}

// rendered returns the object kind/name of objs; the test fails when
// there is none.
func rendered(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
	if i < 0 {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return objs[i]
}

// checkRules parses the PrometheusRule's groups as promtool check rules
// does (rulefmt: YAML, expressions, durations, label and annotation
// templates) and checks that each alert has a severity, a summary and a
// description, and uses only metrics in set. It returns the problems.
func checkRules(pr *monitoringv1.PrometheusRule, set metricSet) []string {
	var problems []string
	b, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		return []string{err.Error()}
	}
	if _, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler)); len(errs) > 0 {
		for _, err := range errs {
			problems = append(problems, "rulefmt: "+err.Error())
		}
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			what := g.Name + "/" + r.Alert + r.Record
			if r.Alert != "" {
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					problems = append(problems, fmt.Sprintf("%s: severity %q", what, s))
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					problems = append(problems, what+": no summary or description")
				}
			}
			unknown, err := unknownMetrics(r.Expr.String(), set)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", what, err))
			}
			for _, n := range unknown {
				problems = append(problems, fmt.Sprintf("%s: metric %s is registered by no daemon", what, n))
			}
		}
	}
	return problems
}

// dashboardQueries returns every query of a Grafana dashboard, by panel
// title, with Grafana's variables replaced; a panel without a query, or a
// query with a variable Grafana would not replace, is a problem.
func dashboardQueries(dashboard []byte) (map[string][]string, []string, error) {
	type panel struct {
		Type, Title string
		Targets     []struct{ Expr string }
		Panels      json.RawMessage
	}
	var d struct {
		UID, Title string
		Panels     []panel
		Templating struct{ List []struct{ Name, Type string } }
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	var problems []string
	if d.UID == "" || d.Title == "" {
		problems = append(problems, "dashboard without uid or title")
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type string }) bool { return v.Name == "datasource" && v.Type == "datasource" }) {
		problems = append(problems, "no datasource variable")
	}
	queries := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				var nested []panel
				if len(p.Panels) > 0 && json.Unmarshal(p.Panels, &nested) == nil {
					walk(nested)
				}
				continue
			}
			if len(p.Targets) == 0 {
				problems = append(problems, fmt.Sprintf("panel %q has no query", p.Title))
			}
			for _, tg := range p.Targets {
				q := grafanaVars.Replace(tg.Expr)
				if q == "" || strings.Contains(q, "$") {
					problems = append(problems, fmt.Sprintf("panel %q: query %q is empty or has an unknown variable", p.Title, tg.Expr))
					continue
				}
				queries[p.Title] = append(queries[p.Title], q)
			}
		}
	}
	walk(d.Panels)
	return queries, problems, nil
}

// The chart's alerts and dashboard, rendered with every monitoring
// value on, parse with Prometheus's own parsers, and every metric they
// use is one a daemon registers; the check fails on one that is not.
func TestMonitoringMetrics(t *testing.T) {
	set := registeredMetrics(t, kubetest.Start(t, "metrics"))
	t.Run("registered", func(t *testing.T) { testMonitoringUsesRegisteredMetrics(t, set) })
	t.Run("unknown", func(t *testing.T) { testMonitoringCheckCatchesUnknownMetrics(t, set) })
}

func testMonitoringUsesRegisteredMetrics(t *testing.T, set metricSet) {
	objs := render(t, monitoringValues())

	pr := convert[monitoringv1.PrometheusRule](t, rendered(t, objs, "PrometheusRule", "causeway"))
	alerts := 0
	for _, g := range pr.Spec.Groups {
		alerts += len(g.Rules)
	}
	if alerts < 10 {
		t.Errorf("%d alerts, want the chart's dozen or so", alerts)
	}
	for _, p := range checkRules(pr, set) {
		t.Error(p)
	}

	cm := convert[corev1.ConfigMap](t, rendered(t, objs, "ConfigMap", "causeway-dashboard"))
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", cm.Labels)
	}
	queries, problems, err := dashboardQueries([]byte(cm.Data["causeway.json"]))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(queries) < 20 {
		t.Errorf("%d panels with queries, want the dashboard's", len(queries))
	}
	for title, qs := range queries {
		for _, q := range qs {
			unknown, err := unknownMetrics(q, set)
			if err != nil {
				t.Errorf("panel %q: %v", title, err)
			}
			for _, n := range unknown {
				t.Errorf("panel %q: metric %s is registered by no daemon", title, n)
			}
		}
	}
}

// The checks fail on a misspelt metric, in an expression and in the
// rendered rules, and on a histogram suffix of a metric that is none.
func testMonitoringCheckCatchesUnknownMetrics(t *testing.T, set metricSet) {
	for expr, want := range map[string][]string{
		"causeway_gateway_active == 0":                                                   nil,
		"causeway_gateway_activ == 0":                                                    {"causeway_gateway_activ"},
		"rate(causeway_gateway_health_check_rtt_seconds_bucket[5m])":                     nil,
		"rate(causeway_gateway_active_bucket[5m])":                                       {"causeway_gateway_active_bucket"},
		`sum by (le) (rate({__name__="causeway_mcs_sync_duration_seconds_bucket"}[5m]))`: nil,
		"go_goroutines + process_resident_memory_bytes":                                  nil,
		"absent(causeway_route_agent_vip_map_entrie)":                                    {"causeway_route_agent_vip_map_entrie"},
	} {
		got, err := unknownMetrics(expr, set)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: unknown %v, want %v", expr, got, want)
		}
	}
	if _, err := unknownMetrics(`{job="x"}`, set); err == nil {
		t.Error("a selector without a metric name passed")
	}

	pr := convert[monitoringv1.PrometheusRule](t, rendered(t, render(t, monitoringValues()), "PrometheusRule", "causeway"))
	if p := checkRules(pr, set); len(p) != 0 {
		t.Fatalf("the chart's rules: %v", p)
	}
	pr.Spec.Groups[0].Rules[0].Expr.StrVal = strings.Replace(pr.Spec.Groups[0].Rules[0].Expr.StrVal, "causeway_gateway_", "causeway_gatway_", 1)
	if p := checkRules(pr, set); len(p) != 1 || !strings.Contains(p[0], "causeway_gatway_") {
		t.Errorf("a misspelt metric in a rule: problems %v, want one naming it", p)
	}
	pr.Spec.Groups[0].Rules[0].Expr.StrVal = "causeway_gateway_active =="
	if p := checkRules(pr, set); len(p) == 0 {
		t.Error("an expression that does not parse passed")
	}
}

// A PodMonitor is rendered for exactly the daemons a Prometheus in the
// cluster can scrape, each selecting that daemon's Pods by a container
// port named as its endpoint whose --metrics-addr is not loopback; the
// host-network daemons on loopback (the default) get none.
func TestPodMonitorsScrapeReachableMetrics(t *testing.T) {
	for name, tc := range map[string]struct {
		bind string
		want []string
	}{
		"loopback": {"loopback", []string{"causeway-globalnet", "causeway-mcs-controller"}},
		"node":     {"node", []string{"causeway-gateway", "causeway-globalnet", "causeway-mcs-controller", "causeway-route-agent"}},
	} {
		t.Run(name, func(t *testing.T) {
			v := monitoringValues()
			v["gateway"] = map[string]any{"metricsBind": tc.bind}
			v["routeAgent"] = map[string]any{"metricsBind": tc.bind}
			objs := render(t, v)
			pods := map[string]*corev1.PodTemplateSpec{}
			for _, o := range objs {
				switch o.GetKind() {
				case "DaemonSet":
					pods[o.GetName()] = &convert[appsv1.DaemonSet](t, o).Spec.Template
				case "Deployment":
					pods[o.GetName()] = &convert[appsv1.Deployment](t, o).Spec.Template
				}
			}
			var got []string
			for _, o := range objs {
				if o.GetKind() != "PodMonitor" {
					continue
				}
				pm := convert[monitoringv1.PodMonitor](t, o)
				got = append(got, pm.Name)
				if pm.Labels["release"] != "kube-prometheus-stack" {
					t.Errorf("%s: labels %v lack the values' release label", pm.Name, pm.Labels)
				}
				var matched []string
				for wl, pod := range pods {
					if matchesAll(pm.Spec.Selector.MatchLabels, pod.Labels) {
						matched = append(matched, wl)
						checkScrapeable(t, pm, pod)
					}
				}
				if len(matched) != 1 || matched[0] != pm.Name {
					t.Errorf("%s selects the Pods of %v, want its own daemon's", pm.Name, matched)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("PodMonitors %v, want %v", got, tc.want)
			}
		})
	}
}

func matchesAll(sel, podLabels map[string]string) bool {
	for k, v := range sel {
		if podLabels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkScrapeable: each endpoint's port is a named container port on
// which the container's --metrics-addr listens, off loopback.
func checkScrapeable(t *testing.T, pm *monitoringv1.PodMonitor, pod *corev1.PodTemplateSpec) {
	t.Helper()
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if ep.Port == nil {
			t.Errorf("%s: endpoint without a port name", pm.Name)
			continue
		}
		found := false
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name != *ep.Port {
					continue
				}
				found = true
				addr := ""
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
						addr = v
					}
				}
				host, port, err := net.SplitHostPort(addr)
				if err != nil || port != fmt.Sprint(p.ContainerPort) || host == "127.0.0.1" || host == "localhost" {
					t.Errorf("%s: port %s (%d) but --metrics-addr %q: Prometheus cannot scrape it", pm.Name, p.Name, p.ContainerPort, addr)
				}
			}
		}
		if !found {
			t.Errorf("%s: no container port named %s", pm.Name, *ep.Port)
		}
	}
}
