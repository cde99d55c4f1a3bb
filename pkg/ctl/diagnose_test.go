package ctl

import (
	"bytes"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	var out bytes.Buffer
	if err := report(&out, []finding{{true, "a", "fine"}, {true, "b", "fine"}}); err != nil {
		t.Errorf("all ok: %v", err)
	}
	if !strings.Contains(out.String(), "all 2 checks passed") {
		t.Errorf("summary missing:\n%s", out.String())
	}
	out.Reset()
	err := report(&out, []finding{{true, "a", "fine"}, {false, "c1: tunnel n0 → c3", "error"}})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 checks failed") {
		t.Errorf("one failed: err=%v", err)
	}
	if !strings.Contains(out.String(), "FAIL c1: tunnel n0 → c3") {
		t.Errorf("failed check not shown:\n%s", out.String())
	}
}

func TestFieldAfter(t *testing.T) {
	line := "7: vx-causeway: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue state UNKNOWN"
	if got := fieldAfter(line, "mtu"); got != "1450" {
		t.Errorf("fieldAfter(mtu) = %q, want 1450", got)
	}
	if got := fieldAfter(line, "nope"); got != "" {
		t.Errorf("fieldAfter(nope) = %q, want empty", got)
	}
}
