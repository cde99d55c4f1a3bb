package daemon

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	good := DefaultOptions(9999, 9998)
	good.ClusterID = "c1"
	good.NodeName = "n1"
	good.PodCIDRs = []string{"10.244.0.0/16"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"cluster id label":  {func(o *Options) { o.ClusterID = "C_1" }, `--cluster-id: "C_1"`},
		"host bits":         {func(o *Options) { o.PodCIDRs = []string{"10.244.1.1/16"} }, "host bits"},
		"default route":     {func(o *Options) { o.ServiceCIDRs = []string{"0.0.0.0/0"} }, "default route"},
		"not a cidr":        {func(o *Options) { o.ServiceCIDRs = []string{"banana"} }, "not a CIDR"},
		"duplicate":         {func(o *Options) { o.PodCIDRs = []string{"10.1.0.0/16", "10.1.0.0/16"} }, "twice"},
		"log level":         {func(o *Options) { o.LogLevel = "loud" }, "--log-level"},
		"log format":        {func(o *Options) { o.LogFormat = "xml" }, "--log-format"},
		"metrics addr":      {func(o *Options) { o.MetricsAddr = "nope" }, "--metrics-addr"},
		"health addr":       {func(o *Options) { o.HealthAddr = "nope" }, "--health-addr"},
		"node name missing": {func(o *Options) { o.NodeName = "" }, "--node-name"},
	} {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.mutate(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
