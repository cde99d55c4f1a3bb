package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/causeway-net/causeway/lab"
)

// kernelState is what the lab's processes hold in the kernel, each
// listing normalised so that the same state lists the same lines (no
// ifindexes, counters, lifetimes or object IDs, no IPv6 link-local
// addresses: a device created again gets a new random one): per node namespace the
// links, addresses, routes of every table, rules, permanent neighbours,
// VXLAN FDB entries, iptables-save and the nftables ruleset; per node
// the BPF programs attached to its cgroup and the processes in its
// cgroups (by name); the lab's bpffs pins and WireGuard UAPI sockets.
// A duplicate or leaked rule, route, link, BPF object or process shows as
// a line more; one missing as a line less. Keys are "<where> <what>".
type kernelState map[string][]string

var (
	ipCounters  = regexp.MustCompile(`\[\d+:\d+\]`)
	nftCounters = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	ifIndex     = regexp.MustCompile(`^\d+: `)
	volatile    = regexp.MustCompile(` (link-netnsid \d+|expires \S+|valid_lft \S+ preferred_lft \S+)`)
	bpfID       = regexp.MustCompile(`"id":\d+,?`)
	// nftElements is a set's or map's element list, which nft wraps
	// over lines by width: listed one element per line instead.
	nftElements = regexp.MustCompile(`elements = \{([^}]*)\}`)
	// netfilterTool names the commands the daemons (and kube-proxy) run
	// and wait for: one caught running is not state (comm is cut at 15
	// bytes: ip6tables-resto, xtables-nft-mul).
	netfilterTool = regexp.MustCompile(`^(ip6?tables|xtables|nft$|ip$)`)
)

// kernelState lists the kernel state of every node of the lab.
func (l *Lab) kernelState() (kernelState, error) {
	st, err := lab.Load(l.Dir)
	if err != nil {
		return nil, err
	}
	h, err := st.Host()
	if err != nil {
		return nil, err
	}
	ks := kernelState{}
	for _, c := range st.Topology.Clusters {
		for _, n := range c.Nodes {
			ns := h.Names().Node(c.Name, n.Name)
			where := c.Name + "/" + n.Name
			for _, q := range []struct {
				what string
				cmd  []string
				keep func(string) bool
			}{
				{"links", []string{"ip", "-n", ns, "-o", "-d", "link", "show"}, nil},
				{"addresses", []string{"ip", "-n", ns, "-o", "addr", "show"}, nil},
				{"routes", []string{"ip", "-n", ns, "route", "show", "table", "all"}, nil},
				{"rules", []string{"ip", "-n", ns, "rule", "show"}, nil},
				{"neighbours", []string{"ip", "-n", ns, "neigh", "show", "nud", "permanent"}, nil},
				{"fdb", []string{"bridge", "-n", ns, "fdb", "show"}, func(s string) bool { return strings.Contains(s, " dst ") }},
				{"iptables", []string{"ip", "netns", "exec", ns, "iptables-save"}, func(s string) bool { return !strings.HasPrefix(s, "#") }},
				{"nftables", []string{"ip", "netns", "exec", ns, "nft", "list", "ruleset"}, nil},
				{"bpf", []string{"bpftool", "-j", "cgroup", "show", h.Cgroups().Node(c.Name, n.Name)}, nil},
			} {
				out, err := exec.Command(q.cmd[0], q.cmd[1:]...).CombinedOutput()
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %v: %s", where, strings.Join(q.cmd, " "), err, out)
				}
				ks.add(where+" "+q.what, string(out), q.keep)
			}
			procs, err := cgroupProcesses(h.Cgroups().Node(c.Name, n.Name))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			ks[where+" processes"] = procs
		}
	}
	var pins []string
	err = filepath.WalkDir(st.BPFFS(), func(path string, _ os.DirEntry, err error) error {
		if err == nil {
			pins = append(pins, strings.TrimPrefix(path, st.BPFFS()))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bpffs pins: %w", err)
	}
	ks["lab bpffs"] = pins
	socks, err := filepath.Glob("/var/run/wireguard/" + l.Prefix + "*")
	if err != nil {
		return nil, err
	}
	ks["lab wireguard sockets"] = socks
	for k := range ks {
		slices.Sort(ks[k])
	}
	return ks, nil
}

// add normalises the lines of out that keep accepts (all when nil).
func (ks kernelState) add(key, out string, keep func(string) bool) {
	out = nftElements.ReplaceAllStringFunc(out, func(set string) string {
		inner := nftElements.FindStringSubmatch(set)[1]
		var lines []string
		for _, e := range strings.Split(inner, ",") {
			lines = append(lines, "element "+strings.Join(strings.Fields(e), " "))
		}
		return strings.Join(lines, "\n")
	})
	for _, s := range strings.Split(out, "\n") {
		s = strings.TrimSpace(s)
		if s == "" || strings.Contains(s, "fe80::") || (keep != nil && !keep(s)) {
			continue
		}
		s = ipCounters.ReplaceAllString(s, "")
		s = nftCounters.ReplaceAllString(s, "counter")
		s = ifIndex.ReplaceAllString(s, "")
		s = volatile.ReplaceAllString(s, "")
		s = bpfID.ReplaceAllString(s, "")
		ks[key] = append(ks[key], s)
	}
}

// cgroupProcesses lists "<cgroup below dir> <process name>" for every
// process in dir and below, except netfilter and ip commands running at
// the moment (netfilterTool).
func cgroupProcesses(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil // removed meanwhile
		}
		rel, _ := filepath.Rel(dir, path)
		for _, pid := range strings.Fields(string(b)) {
			comm, err := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			if name := strings.TrimSpace(string(comm)); err == nil && !netfilterTool.MatchString(name) {
				out = append(out, rel+" "+name)
			}
		}
		return nil
	})
	return out, err
}

// diff describes how b differs from ks ("" when they are equal): the
// lines of each listing only one of them has (as many times as it has
// more of them).
// without is ks without the lines that name an address in one of
// prefixes (e.g. one cluster's subnets and gateway addresses): a line
// goes when any of its words, cut at characters that are not part of an
// address, parses as an address or prefix inside one of prefixes.
func (ks kernelState) without(prefixes ...netip.Prefix) kernelState {
	names := func(s string) bool {
		for _, w := range strings.FieldsFunc(s, func(r rune) bool {
			return !(r == '.' || r == ':' || r == '/' || unicode.Is(unicode.ASCII_Hex_Digit, r))
		}) {
			p, err := netip.ParsePrefix(w)
			if err != nil {
				a, aerr := netip.ParseAddr(w)
				if aerr != nil {
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if slices.ContainsFunc(prefixes, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) {
				return true
			}
		}
		return false
	}
	out := kernelState{}
	for k, lines := range ks {
		for _, s := range lines {
			if !names(s) {
				out[k] = append(out[k], s)
			}
		}
	}
	return out
}

func (ks kernelState) diff(b kernelState) string {
	var keys []string
	for k := range ks {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := ks[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		count := map[string]int{}
		for _, s := range ks[k] {
			count[s]++
		}
		for _, s := range b[k] {
			count[s]--
		}
		var lines []string
		for s, n := range count {
			for ; n > 0; n-- {
				lines = append(lines, "  - "+s)
			}
			for ; n < 0; n++ {
				lines = append(lines, "  + "+s)
			}
		}
		if len(lines) > 0 {
			slices.Sort(lines)
			fmt.Fprintf(&sb, "%s:\n%s\n", k, strings.Join(lines, "\n"))
		}
	}
	return sb.String()
}
