package nat

import "sigs.k8s.io/knftables"

// The table's objects as knftables builds them. Table and Chain objects
// name no family or table: the Runner's knftables.Interface is bound to
// family ip and TableName.

// setTypes is the type of every set and map of the table.
func setTypes() map[string]string {
	t := map[string]string{
		SetRemote:       "ipv4_addr",
		SetRemoteEgress: "ipv4_addr",
		SetLocal:        "ipv4_addr",
		MapPodIn:        "ipv4_addr : ipv4_addr",
		MapPodOut:       "ipv4_addr : ipv4_addr",
		MapPodEgress:    "ipv4_addr : ipv4_addr",
	}
	for _, p := range Protocols {
		t[p+suffixInAddr] = "ipv4_addr . inet_service : ipv4_addr"
		t[p+suffixInPort] = "ipv4_addr . inet_service : inet_service"
		t[p+suffixOutPort] = "ipv4_addr . inet_service : inet_service"
		t[p+suffixOutAddr] = "ipv4_addr . inet_service : ipv4_addr"
	}
	return t
}

// baseChain is a base chain with policy accept; priority is a named
// priority with an offset ("raw-10"), which knftables writes as a number.
func baseChain(name string, typ knftables.BaseChainType, hook knftables.BaseChainHook, priority knftables.BaseChainPriority) *knftables.Chain {
	return &knftables.Chain{Name: name, Type: &typ, Hook: &hook, Priority: &priority, Policy: knftables.PtrTo(knftables.AcceptPolicy)}
}

// addChains queues the chains of d and their rules. Each port rewrite is
// one rule with two statements: if the first lookup misses, the rule
// stops and nothing is rewritten; the second statement's key reads the
// packet as the first left it (ingress: ClusterIP . global port; reply:
// ClusterIP . global port), which the allocator invariant makes unique.
// The rules are nft text: knftables has no rule builder (kube-proxy's
// nftables mode writes its rules as text too).
func addChains(tx *knftables.Transaction, d *desired) {
	// in and out scope the rules to the tunnel device (Config.Device),
	// all but the drop of new flows to a remote's egress address.
	in, out := "", ""
	if d.device != "" {
		in, out = `iifname "`+d.device+`" `, `oifname "`+d.device+`" `
	}
	rule := func(chain, text string) { tx.Add(&knftables.Rule{Chain: chain, Rule: text}) }

	tx.Add(baseChain(ChainIngress, knftables.FilterType, knftables.PreroutingHook, knftables.RawPriority+"-10"))
	for _, p := range Protocols {
		rule(ChainIngress, in+"ip daddr set ip daddr . "+p+" dport map @"+p+suffixInAddr+" "+p+" dport set ip daddr . "+p+" dport map @"+p+suffixInPort)
	}
	rule(ChainIngress, in+"ip daddr set ip daddr map @"+MapPodIn)

	tx.Add(baseChain(ChainReply, knftables.FilterType, knftables.PostroutingHook, knftables.SNATPriority+"+10"))
	// Nothing connects to a remote's egress address (it is only a SNAT
	// source there): a new flow to one is a reply whose entry this node
	// no longer has — a backend's retransmission right after a failover
	// removed the entries of the flows this node tracked while passive,
	// or after this node's route agent, the Lease gone, removed them
	// while the tunnel still carries the remote's packets. Confirmed,
	// its entry would hold the reply tuple the remote's next packet
	// needs (conntrack would remap that packet's port, the backend
	// would reset the connection); dropped here, before conntrack
	// confirms it, no entry is made, and the remote's next packet
	// creates the right one. Whatever the way out: the entry is this
	// node's, the tunnel or the overlay to the next active alike.
	rule(ChainReply, "ct state new ip daddr @"+SetRemoteEgress+" drop")
	for _, p := range Protocols {
		rule(ChainReply, out+"ct direction reply ip daddr @"+SetRemote+" "+p+" sport set ip saddr . "+p+" sport map @"+p+suffixOutPort+
			" ip saddr set ip saddr . "+p+" sport map @"+p+suffixOutAddr)
	}
	rule(ChainReply, out+"ip daddr @"+SetRemote+" ip saddr set ip saddr map @"+MapPodOut)
	// A reply the maps no longer translate (its pair was released while
	// the flow lived) would leak a ClusterIP or pod IP to the remote
	// cluster, whose own addresses may overlap ours: dropped.
	rule(ChainReply, out+"ct direction reply ip daddr @"+SetRemote+" ip saddr != @"+SetLocal+" drop")

	tx.Add(baseChain(ChainEgress, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority+"-10"))
	// A pod of a namespace with its own global egress IP leaves from it;
	// a pod the map does not hold misses the lookup, which ends the rule.
	rule(ChainEgress, out+"ip daddr @"+SetRemote+" ip saddr != @"+SetLocal+" ip saddr != @"+MapPodOut+" snat to ip saddr map @"+MapPodEgress)
	if d.snat != "" {
		rule(ChainEgress, out+"ip daddr @"+SetRemote+" ip saddr != @"+SetLocal+" ip saddr != @"+MapPodOut+" snat to "+d.snat+" persistent")
	}
	tx.Add(&knftables.Chain{Name: ChainCanary})
}

// element is the packed element e of the set or map name.
func element(name string, kind elemKind, e elem, withValue bool) *knftables.Element {
	el := &knftables.Element{Key: keyFields(kind, e.k)}
	if kind == kindPrefix {
		el.Set = name
		return el
	}
	el.Map = name
	if withValue {
		el.Value = valueFields(kind, e.v)
	}
	return el
}

// addFull queues the replacement of the whole table by d, atomic in one
// transaction (the leading add makes the delete safe when it is absent).
func addFull(tx *knftables.Transaction, d *desired) {
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{})
	types, kinds := setTypes(), elemKinds()
	for _, name := range setNames() {
		if kinds[name] == kindPrefix {
			tx.Add(&knftables.Set{Name: name, Type: types[name], Flags: []knftables.SetFlag{knftables.IntervalFlag}})
		} else {
			tx.Add(&knftables.Map{Name: name, Type: types[name]})
		}
	}
	for _, name := range setNames() {
		for _, e := range d.elems[name] {
			tx.Add(element(name, kinds[name], e, true))
		}
	}
	addChains(tx, d)
}

// addDiff queues the change of the table from old to d, elements only
// (d.snat == old.snat, d.device == old.device): deletions of keys gone or
// changed first, then additions of keys new or changed. added and removed
// count elements. The caller queues the canary probe first.
func addDiff(tx *knftables.Transaction, old, d *desired) (added, removed int) {
	kinds := elemKinds()
	dels, adds := map[string][]elem{}, map[string][]elem{}
	for _, name := range setNames() {
		dels[name], adds[name] = diffElems(old.elems[name], d.elems[name])
	}
	for _, name := range setNames() {
		for _, e := range dels[name] {
			tx.Delete(element(name, kinds[name], e, false))
		}
		removed += len(dels[name])
	}
	for _, name := range setNames() {
		for _, e := range adds[name] {
			tx.Add(element(name, kinds[name], e, true))
		}
		added += len(adds[name])
	}
	return added, removed
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

// probeCanary queues the flush of the empty canary chain: a no-op that
// fails the whole transaction when the table (or the chain) is gone. It
// is the cheapest check nft offers (≈ 6 ms; deleting and re-adding the
// chain costs ≈ 17 ms, like any deletion, and any `nft list` first loads
// every element of the table).
func probeCanary(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: ChainCanary}) }

// addCleanup queues the deletion of the table, whether it exists or not.
// (knftables' Destroy would need nft 1.0.8 and kernel 6.3, or emulates
// it exactly so.)
func addCleanup(tx *knftables.Transaction) {
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
}
