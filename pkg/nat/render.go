package nat

import (
	"fmt"
	"strconv"
	"strings"
)

const table = "ip " + TableName

// setTypes is the declaration of every set and map of the table.
func setTypes() map[string]string {
	t := map[string]string{
		SetRemote:       "type ipv4_addr; flags interval;",
		SetRemoteEgress: "type ipv4_addr; flags interval;",
		SetLocal:        "type ipv4_addr; flags interval;",
		MapPodIn:        "type ipv4_addr : ipv4_addr;",
		MapPodOut:       "type ipv4_addr : ipv4_addr;",
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
	// in and out scope every rule to the tunnel device (Config.Device).
	in, out := "", ""
	if d.device != "" {
		in, out = fmt.Sprintf("iifname %q ", d.device), fmt.Sprintf("oifname %q ", d.device)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook prerouting priority raw - 10; policy accept;\n", ChainIngress)
	for _, p := range Protocols {
		fmt.Fprintf(&b, "\t\t%[4]sip daddr set ip daddr . %[1]s dport map @%[1]s%[2]s %[1]s dport set ip daddr . %[1]s dport map @%[1]s%[3]s\n",
			p, suffixInAddr, suffixInPort, in)
	}
	fmt.Fprintf(&b, "\t\t%sip daddr set ip daddr map @%s\n\t}\n", in, MapPodIn)

	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook postrouting priority srcnat + 10; policy accept;\n", ChainReply)
	// Nothing connects to a remote's egress address (it is only a SNAT
	// source there): a new flow to one is a reply whose entry this node
	// no longer has — a backend's retransmission right after a failover
	// removed the entries of the flows this node tracked while passive.
	// SNATed, its entry would hold the reply tuple the remote's next
	// packet needs, and that flow would never be tracked again; dropped
	// here, before conntrack confirms it, no entry is made, and the
	// remote's next packet creates the right one.
	fmt.Fprintf(&b, "\t\t%sct state new ip daddr @%s drop\n", out, SetRemoteEgress)
	for _, p := range Protocols {
		fmt.Fprintf(&b, "\t\t%[5]sct direction reply ip daddr @%[4]s %[1]s sport set ip saddr . %[1]s sport map @%[1]s%[2]s ip saddr set ip saddr . %[1]s sport map @%[1]s%[3]s\n",
			p, suffixOutPort, suffixOutAddr, SetRemote, out)
	}
	fmt.Fprintf(&b, "\t\t%sip daddr @%s ip saddr set ip saddr map @%s\n", out, SetRemote, MapPodOut)
	// A reply the maps no longer translate (its pair was released while
	// the flow lived) would leak a ClusterIP or pod IP to the remote
	// cluster, whose own addresses may overlap ours: dropped.
	fmt.Fprintf(&b, "\t\t%sct direction reply ip daddr @%s ip saddr != @%s drop\n\t}\n", out, SetRemote, SetLocal)

	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype nat hook postrouting priority srcnat - 10; policy accept;\n", ChainEgress)
	if d.snat != "" {
		fmt.Fprintf(&b, "\t\t%sip daddr @%s ip saddr != @%s ip saddr != @%s snat to %s persistent\n", out, SetRemote, SetLocal, MapPodOut, d.snat)
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
	types, kinds := setTypes(), elemKinds()
	for _, name := range setNames() {
		kind := "set"
		if strings.Contains(types[name], " : ") {
			kind = "map"
		}
		fmt.Fprintf(&b, "\t%s %s {\n\t\t%s\n", kind, name, types[name])
		if els := d.elems[name]; len(els) > 0 {
			b.WriteString("\t\telements = { ")
			writeElements(&b, kinds[name], els, true)
			b.WriteString(" }\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString(chainRules(d))
	b.WriteString("}\n")
	return b.String()
}

// renderDiff is the nft script taking the table from old to d, elements
// only (d.snat == old.snat, d.device == old.device), after the canary probe, which fails the
// whole transaction if the table is gone. added and removed count elements.
func renderDiff(old, d *desired) (script string, added, removed int) {
	var b strings.Builder
	b.WriteString(canaryProbe)
	kinds := elemKinds()
	dels, adds := map[string][]elem{}, map[string][]elem{}
	for _, name := range setNames() {
		dels[name], adds[name] = diffElems(old.elems[name], d.elems[name])
	}
	for _, name := range setNames() {
		if del := dels[name]; len(del) > 0 {
			fmt.Fprintf(&b, "delete element %s %s { ", table, name)
			writeElements(&b, kinds[name], del, false)
			b.WriteString(" }\n")
			removed += len(del)
		}
	}
	for _, name := range setNames() {
		if add := adds[name]; len(add) > 0 {
			fmt.Fprintf(&b, "add element %s %s { ", table, name)
			writeElements(&b, kinds[name], add, true)
			b.WriteString(" }\n")
			added += len(add)
		}
	}
	return b.String(), added, removed
}

// diffElems merges two sorted element lists: del are keys gone or with a
// changed value (deleted first), add are keys new or changed.
func diffElems(have, want []elem) (del, add []elem) {
	i, j := 0, 0
	for i < len(have) || j < len(want) {
		switch {
		case j == len(want) || (i < len(have) && have[i].k < want[j].k):
			del = append(del, have[i])
			i++
		case i == len(have) || want[j].k < have[i].k:
			add = append(add, want[j])
			j++
		default:
			if have[i].v != want[j].v {
				del, add = append(del, have[i]), append(add, want[j])
			}
			i++
			j++
		}
	}
	return del, add
}

// writeElements writes els (sorted), with values for maps if withValues
// (deletes name keys only).
func writeElements(b *strings.Builder, kind elemKind, els []elem, withValues bool) {
	for i, e := range els {
		if i > 0 {
			b.WriteString(", ")
		}
		writeKey(b, kind, e.k)
		if withValues && kind != kindPrefix {
			b.WriteString(" : ")
			writeValue(b, kind, e.v)
		}
	}
}

func writeAddr(b *strings.Builder, a uint32) {
	var buf [15]byte
	b.Write(addrFromIndex(a).AppendTo(buf[:0]))
}

func writeKey(b *strings.Builder, kind elemKind, k uint64) {
	switch kind {
	case kindPrefix:
		writeAddr(b, uint32(k>>8))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(int(k & 0xff)))
	case kindAddrAddr:
		writeAddr(b, uint32(k))
	default:
		writeAddr(b, uint32(k>>16))
		b.WriteString(" . ")
		b.WriteString(strconv.Itoa(int(k & 0xffff)))
	}
}

func writeValue(b *strings.Builder, kind elemKind, v uint32) {
	switch kind {
	case kindPrefix:
	case kindAddrPortPort:
		b.WriteString(strconv.Itoa(int(v)))
	default:
		writeAddr(b, v)
	}
}

// canaryProbe flushes the empty canary chain: a no-op that fails the
// whole transaction when the table (or the chain) is gone. It is the
// cheapest check nft offers (≈ 6 ms; deleting and re-adding the chain
// costs ≈ 17 ms, like any deletion, and any `nft list` first loads every
// element of the table).
var canaryProbe = fmt.Sprintf("flush chain %s %s\n", table, ChainCanary)

// renderCleanup deletes the table, whether it exists or not.
func renderCleanup() string {
	return fmt.Sprintf("add table %s\ndelete table %s\n", table, table)
}
