package routeagent

import (
	"fmt"
	"slices"
	"strings"
)

// ownedChains are the only chains the route agent ever creates, flushes
// or deletes (other Causeway components have their own).
var ownedChains = []string{ChainMSS, ChainForward, ChainCanary}

// ownedTables are the tables the owned chains live in.
var ownedTables = []string{"filter", "mangle"}

func isOwned(chain string) bool { return slices.Contains(ownedChains, chain) }

// savedTable is the part of one table of `iptables-save` output the agent
// cares about.
type savedTable struct {
	chains map[string]bool     // every chain declared
	rules  map[string][]string // owned chain -> rule specs
	jumps  []savedJump         // rules in other chains that jump to an owned chain
}

type savedJump struct {
	from, spec string
}

// parseSave parses `iptables-save` output into tables.
func parseSave(out string) map[string]*savedTable {
	tables := map[string]*savedTable{}
	var cur *savedTable
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = &savedTable{chains: map[string]bool{}, rules: map[string][]string{}}
			tables[line[1:]] = cur
		case cur == nil:
		case line == "COMMIT":
			cur = nil
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cur.chains[name] = true
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			if isOwned(chain) {
				cur.rules[chain] = append(cur.rules[chain], spec)
				continue
			}
			if target := jumpTarget(spec); isOwned(target) {
				cur.jumps = append(cur.jumps, savedJump{from: chain, spec: spec})
			}
		}
	}
	return tables
}

// jumpTarget returns the chain a rule spec jumps or goes to, if any.
func jumpTarget(spec string) string {
	f := strings.Fields(spec)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" || f[i] == "-g" {
			return f[i+1]
		}
	}
	return ""
}

// iptablesPlan is the outcome of comparing the saved state with the
// desired rules.
type iptablesPlan struct {
	// Payload for `iptables-restore --noflush`; empty when nothing differs.
	Payload string
	// CanaryMissing: the canary chain was absent, i.e. something outside
	// flushed or deleted our chains since the last sync (or this is the
	// first sync on the node).
	CanaryMissing bool
}

// planIptables renders the one iptables-restore transaction that makes
// the owned chains and jumps of saved equal to want. Foreign chains and
// rules are never named in the payload, except the jump rules into owned
// chains in builtin chains, which are added or deleted individually.
func planIptables(saved string, want Rules) iptablesPlan {
	tables := parseSave(saved)
	var plan iptablesPlan
	if t := tables["mangle"]; t == nil || !t.chains[ChainCanary] {
		plan.CanaryMissing = true
	}
	var b strings.Builder
	for _, table := range ownedTables {
		have := tables[table]
		if have == nil {
			have = &savedTable{chains: map[string]bool{}, rules: map[string][]string{}}
		}
		wantChains := want.Chains[table]
		var body []string
		// Owned chains whose rules differ are redeclared (which flushes
		// them under --noflush) and refilled.
		for _, c := range sortedKeys(wantChains) {
			if have.chains[c] && slices.Equal(have.rules[c], wantChains[c]) {
				continue
			}
			body = append(body, ":"+c+" - [0:0]")
			for _, r := range wantChains[c] {
				body = append(body, "-A "+c+" "+r)
			}
		}
		// Jumps: keep exactly one of each wanted jump, delete the rest.
		var wantJumps []Jump
		for _, j := range want.Jumps {
			if j.Table == table {
				wantJumps = append(wantJumps, j)
			}
		}
		kept := map[Jump]bool{}
		for _, h := range have.jumps {
			i := slices.IndexFunc(wantJumps, func(j Jump) bool { return j.From == h.from && j.Spec() == h.spec })
			if i >= 0 && !kept[wantJumps[i]] {
				kept[wantJumps[i]] = true
				continue
			}
			body = append(body, "-D "+h.from+" "+h.spec)
		}
		for _, j := range wantJumps {
			if kept[j] {
				continue
			}
			if j.Insert {
				body = append(body, "-I "+j.From+" 1 "+j.Spec())
			} else {
				body = append(body, "-A "+j.From+" "+j.Spec())
			}
		}
		// Owned chains no longer wanted in this table are flushed and deleted
		// (their jumps were deleted above).
		for _, c := range ownedChains {
			if _, ok := wantChains[c]; ok || !have.chains[c] {
				continue
			}
			body = append(body, ":"+c+" - [0:0]", "-X "+c)
		}
		if len(body) == 0 {
			continue
		}
		fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", table, strings.Join(body, "\n"))
	}
	plan.Payload = b.String()
	return plan
}
