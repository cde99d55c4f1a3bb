package routeagent

import (
	"fmt"
	"slices"
	"strings"
)

// ownedChains are the only chains the route agent ever creates, flushes
// or deletes (other Causeway components have their own).
var ownedChains = []string{ChainMSS, ChainForward, ChainCanary, ChainNAT}

// ownedTables are the tables the owned chains live in.
var ownedTables = []string{"filter", "mangle", "nat"}

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
	// index is the rule's position in its chain (0 = first).
	index int
}

// parseSave parses `iptables-save` output into tables.
func parseSave(out string) map[string]*savedTable {
	tables := map[string]*savedTable{}
	var cur *savedTable
	var count map[string]int // rules seen per chain of the current table
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = &savedTable{chains: map[string]bool{}, rules: map[string][]string{}}
			tables[line[1:]] = cur
			count = map[string]int{}
		case cur == nil:
		case line == "COMMIT":
			cur = nil
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cur.chains[name] = true
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			index := count[chain]
			count[chain]++
			if isOwned(chain) {
				cur.rules[chain] = append(cur.rules[chain], spec)
				continue
			}
			if target := jumpTarget(spec); isOwned(target) {
				cur.jumps = append(cur.jumps, savedJump{from: chain, spec: spec, index: index})
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
		// Jumps: keep exactly one of each wanted jump, delete the rest
		// and foreign-made jumps into owned chains. An Insert jump must
		// be the first rule of its chain; when it is not (or has
		// duplicates), every copy is deleted and one inserted at the top.
		var wantJumps []Jump
		for _, j := range want.Jumps {
			if j.Table == table {
				wantJumps = append(wantJumps, j)
			}
		}
		var dels, adds []string
		for _, h := range have.jumps {
			if !slices.ContainsFunc(wantJumps, func(j Jump) bool { return j.From == h.from && j.Spec() == h.spec }) {
				dels = append(dels, "-D "+h.from+" "+h.spec)
			}
		}
		for _, j := range wantJumps {
			var copies []savedJump
			for _, h := range have.jumps {
				if h.from == j.From && h.spec == j.Spec() {
					copies = append(copies, h)
				}
			}
			keep := len(copies) > 0
			if j.Insert {
				keep = len(copies) == 1 && copies[0].index == 0
			}
			for i := range copies {
				if keep && i == 0 {
					continue
				}
				dels = append(dels, "-D "+j.From+" "+j.Spec())
			}
			switch {
			case keep:
			case j.Insert:
				adds = append(adds, "-I "+j.From+" 1 "+j.Spec())
			default:
				adds = append(adds, "-A "+j.From+" "+j.Spec())
			}
		}
		body = append(body, dels...)
		body = append(body, adds...)
		// Owned chains no longer wanted in this table are flushed and deleted
		// (their jumps were deleted above): all flushed before any is
		// deleted, as one may jump to another.
		var gone []string
		for _, c := range ownedChains {
			if _, ok := wantChains[c]; ok || !have.chains[c] {
				continue
			}
			body = append(body, ":"+c+" - [0:0]")
			gone = append(gone, "-X "+c)
		}
		body = append(body, gone...)
		if len(body) == 0 {
			continue
		}
		fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", table, strings.Join(body, "\n"))
	}
	plan.Payload = b.String()
	return plan
}
