package routeagent

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// renderSave renders tables as iptables-save output that parseSave reads
// back into the same tables: declared chains, the rules of owned chains,
// and each jump into an owned chain at its index (preceded by as many
// foreign rules, which parseSave does not keep).
func renderSave(tables map[string]*savedTable) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		t := tables[name]
		fmt.Fprintf(&b, "*%s\n", name)
		for _, c := range slices.Sorted(maps.Keys(t.chains)) {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, c := range slices.Sorted(maps.Keys(t.rules)) {
			for _, r := range t.rules[c] {
				fmt.Fprintf(&b, "-A %s %s\n", c, r)
			}
		}
		count := map[string]int{}
		for _, j := range t.jumps {
			for ; count[j.from] < j.index; count[j.from]++ {
				fmt.Fprintf(&b, "-A %s -j RETURN\n", j.from)
			}
			fmt.Fprintf(&b, "-A %s %s\n", j.from, j.spec)
			count[j.from]++
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// FuzzParseSave checks, for any text, that parseSave does not panic, that
// what it keeps is what it documents (rules of owned chains only, jumps
// from other chains into owned chains at increasing indexes) and that
// parsing the rendering of its result gives the same result. The seed
// corpus is in testdata/fuzz/FuzzParseSave (run by a plain go test).
func FuzzParseSave(f *testing.F) {
	f.Add("*mangle\n:POSTROUTING ACCEPT [0:0]\n:CAUSEWAY-MSS - [0:0]\n-A POSTROUTING -j KUBE-X\n" +
		"-A POSTROUTING -m comment --comment \"causeway route agent\" -j CAUSEWAY-MSS\n-A CAUSEWAY-MSS -j RETURN\nCOMMIT\n")
	f.Fuzz(func(t *testing.T, saved string) {
		tables := parseSave(saved)
		for name, tab := range tables {
			for c := range tab.rules {
				if !isOwned(c) {
					t.Fatalf("%s: rules kept for foreign chain %q", name, c)
				}
			}
			last := map[string]int{}
			for _, j := range tab.jumps {
				if isOwned(j.from) || !isOwned(jumpTarget(j.spec)) {
					t.Fatalf("%s: jump %+v is not from a foreign chain into an owned one", name, j)
				}
				if i, ok := last[j.from]; ok && j.index <= i {
					t.Fatalf("%s: jump indexes of %s not increasing: %+v", name, j.from, tab.jumps)
				}
				last[j.from] = j.index
			}
		}
		rendered := renderSave(tables)
		if again := parseSave(rendered); !reflect.DeepEqual(again, tables) {
			t.Fatalf("parse(render(parse(x))) != parse(x)\nrendered:\n%s", rendered)
		}
	})
}

// fuzzStates are the desired rule sets FuzzPlanIptables syncs to.
func fuzzStates() []Rules {
	return []Rules{
		Compute(Inputs{NodeName: "n2", NodeIP: nodeW}).Rules,
		Compute(Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c3}}).Rules,
		Compute(Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c3, c4}}).Rules,
		Compute(Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c4}, Params: Params{TunnelMTU: 1300}}).Rules,
		{}, // cleanup
	}
}

// FuzzPlanIptables drives the fake iptables (iptables_test.go) through
// outside changes and syncs read from the input, one per line:
//
//	s <n>                  sync to fuzzStates()[n % 5]
//	a|i <table> <chain> <rule>...  append / insert a rule ("ours <chain>" is
//	                       the agent's jump spec to <chain>)
//	f|n|x <table> <chain>  flush / create / delete a chain
//
// Tables are f(ilter), m(angle), n(at) by first letter. Outside changes
// obey the kernel: a jump needs its target chain, a chain in use or with
// rules is not deleted. After every sync the owned chains and jumps are
// exactly the desired ones, a second sync is a no-op, and every foreign
// rule (not a jump into an owned chain) is where it was.
func FuzzPlanIptables(f *testing.F) {
	f.Add("s 2\na f FORWARD -j DROP\ni n POSTROUTING ours CAUSEWAY-POSTROUTING\ns 2\ns 4\n")
	states := fuzzStates()
	f.Fuzz(func(t *testing.T, ops string) {
		fk := newFakeIPTables()
		step := 0
		for line := range strings.Lines(ops) {
			fl := strings.Fields(line)
			if len(fl) < 2 {
				continue
			}
			if fl[0] == "s" {
				n := 0
				for _, c := range fl[1] {
					n = (n*10 + int(c%10)) % len(states)
				}
				want := states[n]
				before := foreignRules(fk)
				plan := fk.applyErr(want)
				where := fmt.Sprintf("step %d (%s)", step, strings.TrimSpace(line))
				if plan.err != nil {
					t.Fatalf("%s: restore failed: %v\npayload:\n%s", where, plan.err, plan.Payload)
				}
				fk.checkEqual(t, want, where)
				if p := fk.applyErr(want); p.Payload != "" {
					t.Fatalf("%s: second sync not a no-op:\n%s", where, p.Payload)
				}
				if after := foreignRules(fk); !reflect.DeepEqual(after, before) {
					t.Fatalf("%s: foreign rules changed:\n%v\nwere\n%v", where, after, before)
				}
				step++
				continue
			}
			if len(fl) < 3 {
				continue
			}
			tab := fk.tables[map[byte]string{'f': "filter", 'm': "mangle", 'n': "nat"}[fl[1][0]]]
			if tab == nil {
				continue
			}
			chain := fl[2]
			exists := slices.Contains(tab.order, chain)
			switch fl[0] {
			case "a", "i":
				spec := strings.Join(fl[3:], " ")
				if len(fl) == 5 && fl[3] == "ours" {
					spec = Jump{To: fl[4]}.Spec()
				}
				target := jumpTarget(spec)
				if !exists || strings.HasPrefix(target, "CAUSEWAY-") && !slices.Contains(tab.order, target) {
					continue
				}
				if fl[0] == "a" {
					tab.rules[chain] = append(tab.rules[chain], spec)
				} else {
					tab.rules[chain] = slices.Insert(tab.rules[chain], 0, spec)
				}
			case "f":
				if exists {
					tab.rules[chain] = nil
				}
			case "n":
				if !exists {
					tab.order = append(tab.order, chain)
				}
			case "x":
				if !exists || len(tab.rules[chain]) > 0 || slices.Contains(builtin[tableName(fk, tab)], chain) || referenced(tab, chain) {
					continue
				}
				tab.order = slices.DeleteFunc(tab.order, func(s string) bool { return s == chain })
				delete(tab.rules, chain)
			}
		}
	})
}

type planResult struct {
	iptablesPlan
	err error
}

// applyErr is apply returning the restore error instead of failing.
func (f *fakeIPTables) applyErr(want Rules) planResult {
	saved, _ := f.Save(context.Background(), ownedTables)
	plan := planIptables(saved, want)
	var err error
	if plan.Payload != "" {
		err = f.Restore(context.Background(), plan.Payload)
	}
	return planResult{plan, err}
}

func tableName(f *fakeIPTables, t *fakeTable) string {
	for n, x := range f.tables {
		if x == t {
			return n
		}
	}
	return ""
}

func referenced(t *fakeTable, chain string) bool {
	for _, rs := range t.rules {
		for _, r := range rs {
			if jumpTarget(r) == chain {
				return true
			}
		}
	}
	return false
}

// foreignRules returns, per table and foreign chain, the rules that are
// not jumps into owned chains.
func foreignRules(f *fakeIPTables) map[string][]string {
	out := map[string][]string{}
	for name, t := range f.tables {
		for _, c := range t.order {
			if isOwned(c) {
				continue
			}
			var rs []string
			for _, r := range t.rules[c] {
				if !isOwned(jumpTarget(r)) {
					rs = append(rs, r)
				}
			}
			out[name+"/"+c] = rs
		}
	}
	return out
}

// Found by FuzzPlanIptables (seed owned_chain_in_wrong_table): two owned
// chains left in a table where neither is wanted, one jumping to the
// other, were flushed and deleted chain by chain in ownedChains order, so
// the jumped-to chain was deleted while still referenced and every sync's
// transaction failed.
func TestPlanIptablesDeletesChainsJumpingToEachOther(t *testing.T) {
	f := newFakeIPTables()
	nat := f.tables["nat"]
	nat.order = append(nat.order, ChainForward, ChainMSS)
	nat.rules[ChainForward] = []string{"-j " + ChainMSS}
	want := Compute(Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c3}}).Rules
	f.apply(t, want)
	f.checkEqual(t, want, "after sync")
}
