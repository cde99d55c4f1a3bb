package lab

import (
	"reflect"
	"testing"

	"helm.sh/helm/v4/pkg/strvals"
)

// The --set values the lab prints for join give the chart exactly the
// lab's own values (ChartValues) but those join sets itself, through the
// parser join uses.
func TestJoinSetFlagsAreChartValues(t *testing.T) {
	for _, noGlobalnet := range []bool{false, true} {
		for _, cable := range []string{"wireguard", "vxlan"} {
			top, err := Config{Prefix: "cwt-", Clusters: 2, Nodes: 2}.Topology()
			if err != nil {
				t.Fatal(err)
			}
			st := &State{Prefix: "cwt-", Topology: top, Cable: cable, Globalnet: !noGlobalnet, NoInstall: true}
			c, _ := top.Cluster("c2")
			want := st.ChartValues(c)
			got := map[string]any{}
			for _, s := range st.JoinSetFlags("c2") {
				if err := strvals.ParseInto(s, got); err != nil {
					t.Fatalf("--set %s: %v", s, err)
				}
			}
			for _, k := range joinValues {
				if _, ok := want[k]; !ok {
					t.Errorf("join sets %s, which ChartValues lacks", k)
				}
				got[k] = want[k]
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("cable %s, globalnet %v: --set %q gives %v, want %v", cable, !noGlobalnet, st.JoinSetFlags("c2"), got, want)
			}
		}
	}
}

func TestShellLine(t *testing.T) {
	got := shellLine("bin/causewayctl", []string{"join", "--set", "gateway.extraArgs={--tunnel-device=cwl-c1$(NODE_NAME)}", "it's"})
	want := `bin/causewayctl join --set 'gateway.extraArgs={--tunnel-device=cwl-c1$(NODE_NAME)}' 'it'\''s'`
	if got != want {
		t.Errorf("%s, want %s", got, want)
	}
}
