package nat

import (
	"fmt"
	"slices"
	"strings"
)

const table = "ip " + TableName

// setTypes is the declaration of every set and map of the table.
func setTypes() map[string]string {
	t := map[string]string{
		SetRemote: "type ipv4_addr; flags interval;",
		SetLocal:  "type ipv4_addr; flags interval;",
		MapPodIn:  "type ipv4_addr : ipv4_addr;",
		MapPodOut: "type ipv4_addr : ipv4_addr;",
	}
	for _, p := range Protocols {
		t[p+suffixInAddr] = "type ipv4_addr . inet_service : ipv4_addr;"
		t[p+suffixInPort] = "type ipv4_addr . inet_service : inet_service;"
		t[p+suffixOutPort] = "type ipv4_addr . inet_service : inet_service;"
		t[p+suffixOutAddr] = "type ipv4_addr . inet_service : ipv4_addr;"
	}
	return t
}

// chainRules renders the chains of d. Each port rewrite is one rule with
// two statements: if the first lookup misses, the rule stops and nothing
// is rewritten; the second statement's key reads the packet as the first
// left it (ingress: ClusterIP . global port; reply: ClusterIP . global
// port), which the allocator invariant makes unique.
func chainRules(d *desired) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook prerouting priority raw - 10; policy accept;\n", ChainIngress)
	for _, p := range Protocols {
		fmt.Fprintf(&b, "\t\tip daddr set ip daddr . %[1]s dport map @%[1]s%[2]s %[1]s dport set ip daddr . %[1]s dport map @%[1]s%[3]s\n",
			p, suffixInAddr, suffixInPort)
	}
	fmt.Fprintf(&b, "\t\tip daddr set ip daddr map @%s\n\t}\n", MapPodIn)

	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook postrouting priority srcnat + 10; policy accept;\n", ChainReply)
	for _, p := range Protocols {
		fmt.Fprintf(&b, "\t\tct direction reply ip daddr @%[4]s %[1]s sport set ip saddr . %[1]s sport map @%[1]s%[2]s ip saddr set ip saddr . %[1]s sport map @%[1]s%[3]s\n",
			p, suffixOutPort, suffixOutAddr, SetRemote)
	}
	fmt.Fprintf(&b, "\t\tip daddr @%s ip saddr set ip saddr map @%s\n\t}\n", SetRemote, MapPodOut)

	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype nat hook postrouting priority srcnat - 10; policy accept;\n", ChainEgress)
	if d.snat != "" {
		fmt.Fprintf(&b, "\t\tip daddr @%s ip saddr != @%s ip saddr != @%s snat to %s persistent\n", SetRemote, SetLocal, MapPodOut, d.snat)
	}
	b.WriteString("\t}\n")
	fmt.Fprintf(&b, "\tchain %s {\n\t}\n", ChainCanary)
	return b.String()
}

// renderFull is the nft script replacing the whole table by d in one
// transaction (the leading add makes the delete safe when it is absent).
func renderFull(d *desired) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s\ndelete table %s\ntable %s {\n", table, table, table)
	types := setTypes()
	for _, name := range setNames() {
		kind := "set"
		if strings.Contains(types[name], " : ") {
			kind = "map"
		}
		fmt.Fprintf(&b, "\t%s %s {\n\t\t%s\n", kind, name, types[name])
		if els := d.elems[name]; len(els) > 0 {
			b.WriteString("\t\telements = { ")
			writeElements(&b, els, true)
			b.WriteString(" }\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString(chainRules(d))
	b.WriteString("}\n")
	return b.String()
}

// renderDiff is the nft script taking the table from old to d, elements
// only (d.snat == old.snat), plus the canary probe: deleting and
// re-adding the canary chain fails the whole transaction if the table is
// gone. added and removed count elements.
func renderDiff(old, d *desired) (script string, added, removed int) {
	var b strings.Builder
	fmt.Fprintf(&b, "delete chain %s %s\nadd chain %s %s\n", table, ChainCanary, table, ChainCanary)
	for _, name := range setNames() {
		have, want := old.elems[name], d.elems[name]
		del := map[string]string{}
		for k, v := range have {
			if w, ok := want[k]; !ok || w != v {
				del[k] = v
			}
		}
		if len(del) > 0 {
			fmt.Fprintf(&b, "delete element %s %s { ", table, name)
			writeElements(&b, del, false)
			b.WriteString(" }\n")
			removed += len(del)
		}
	}
	for _, name := range setNames() {
		have, want := old.elems[name], d.elems[name]
		add := map[string]string{}
		for k, v := range want {
			if h, ok := have[k]; !ok || h != v {
				add[k] = v
			}
		}
		if len(add) > 0 {
			fmt.Fprintf(&b, "add element %s %s { ", table, name)
			writeElements(&b, add, true)
			b.WriteString(" }\n")
			added += len(add)
		}
	}
	return b.String(), added, removed
}

// writeElements writes els sorted by key, with values for maps if
// withValues (deletes name keys only).
func writeElements(b *strings.Builder, els map[string]string, withValues bool) {
	keys := make([]string, 0, len(els))
	for k := range els {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		if v := els[k]; withValues && v != "" {
			b.WriteString(" : ")
			b.WriteString(v)
		}
	}
}

// renderCleanup deletes the table, whether it exists or not.
func renderCleanup() string {
	return fmt.Sprintf("add table %s\ndelete table %s\n", table, table)
}
