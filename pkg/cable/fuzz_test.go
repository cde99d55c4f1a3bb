package cable

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// parseValidateSpec reads the FuzzValidate input, one directive per line:
//
//	R [key] [v4]                          the Requirements (PublicKey, IPv4Endpoint)
//	C <id> <addr:port> <key> <subnet>...  one connection
//
// An id "-" is the empty cluster ID, a key "-" the zero key (anything
// else is a non-zero key derived from its bytes). Endpoints and subnets
// that do not parse are passed as zero values (invalid); subnets are not
// masked, so host bits reach Validate.
func parseValidateSpec(spec string) ([]Connection, Requirements) {
	var req Requirements
	var conns []Connection
	for line := range strings.Lines(spec) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "R":
			req.PublicKey = slices.Contains(f[1:], "key")
			req.IPv4Endpoint = slices.Contains(f[1:], "v4")
		case f[0] == "C" && len(f) >= 4:
			c := Connection{ClusterID: f[1]}
			if c.ClusterID == "-" {
				c.ClusterID = ""
			}
			c.Endpoint, _ = netip.ParseAddrPort(f[2])
			if f[3] != "-" {
				copy(c.PublicKey[:], f[3])
				c.PublicKey[31] = 1
			}
			for _, s := range f[4:] {
				p, _ := netip.ParsePrefix(s)
				c.Subnets = append(c.Subnets, p)
			}
			conns = append(conns, c)
		}
	}
	return conns, req
}

// FuzzValidate checks, for any connections, that Validate does not panic,
// that what it returns is what its doc promises (sorted by unique,
// non-empty cluster ID; a usable endpoint and, when required, a key and
// an IPv4 endpoint; canonical, sorted, deduplicated subnets, none a
// default route, none in two returned connections; exactly the subnets
// asked for), that every connection is either returned or reported in a
// *ValidationError, that IPv4Endpoint concerns the endpoint alone (a
// connection with an IPv4 endpoint that passes without it passes with
// it, IPv6 subnets included), and that the outcome does not depend on
// the order of the input. The seed corpus is in
// testdata/fuzz/FuzzValidate (run by a plain go test).
func FuzzValidate(f *testing.F) {
	f.Add("R key\nC c2 198.18.0.2:4500 k 10.2.0.0/16 10.2.0.0/16\nC c3 198.18.0.3:4500 k 10.2.0.0/16\n")
	f.Fuzz(func(t *testing.T, spec string) {
		conns, req := parseValidateSpec(spec)
		in := cloneConns(conns)
		got, err := Validate(conns, req)
		if !reflect.DeepEqual(conns, in) {
			t.Fatalf("Validate modified its input")
		}
		checkValidated(t, in, req, got, err)
		loose := req
		loose.IPv4Endpoint = false
		wide, _ := Validate(in, loose)
		for _, c := range wide {
			if c.Endpoint.Addr().Is4() && !slices.ContainsFunc(got, func(g Connection) bool { return reflect.DeepEqual(g, c) }) {
				t.Fatalf("%q passes without IPv4Endpoint but not with it: %v", c.ClusterID, c)
			}
		}
		wantRejected := rejectedIDs(t, err)
		rng := rand.New(rand.NewPCG(uint64(len(spec)), 3))
		for range 4 {
			sh := cloneConns(in)
			rng.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
			again, err := Validate(sh, req)
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("order changed the valid connections:\n%v\nwant\n%v", again, got)
			}
			if r := rejectedIDs(t, err); !slices.Equal(r, wantRejected) {
				t.Fatalf("order changed the rejected connections: %q, want %q", r, wantRejected)
			}
		}
	})
}

func cloneConns(cs []Connection) []Connection {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Subnets = slices.Clone(out[i].Subnets)
	}
	return out
}

// rejectedIDs returns the sorted cluster IDs of the *ValidationErrors in
// err, failing on any other error.
func rejectedIDs(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ids []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ve *ValidationError
		if !errors.As(e, &ve) {
			t.Fatalf("error %v is not a *ValidationError", e)
		}
		ids = append(ids, ve.ClusterID)
	}
	slices.Sort(ids)
	return ids
}

func checkValidated(t *testing.T, in []Connection, req Requirements, got []Connection, err error) {
	t.Helper()
	rejected := rejectedIDs(t, err)
	asked := map[string][]Connection{}
	for _, c := range in {
		asked[c.ClusterID] = append(asked[c.ClusterID], c)
	}
	owner := map[netip.Prefix]string{}
	for i, c := range got {
		if c.ClusterID == "" {
			t.Fatalf("returned a connection without cluster ID: %v", c)
		}
		if i > 0 && got[i-1].ClusterID >= c.ClusterID {
			t.Fatalf("not sorted by unique cluster ID: %q then %q", got[i-1].ClusterID, c.ClusterID)
		}
		if len(asked[c.ClusterID]) != 1 {
			t.Fatalf("returned %q, asked for %d times", c.ClusterID, len(asked[c.ClusterID]))
		}
		if slices.Contains(rejected, c.ClusterID) {
			t.Fatalf("%q both returned and rejected", c.ClusterID)
		}
		a := c.Endpoint.Addr()
		if !a.IsValid() || a.IsUnspecified() || a.Is4In6() || c.Endpoint.Port() == 0 {
			t.Fatalf("%q: unusable endpoint %s", c.ClusterID, c.Endpoint)
		}
		if req.PublicKey && c.PublicKey.IsZero() {
			t.Fatalf("%q: no key", c.ClusterID)
		}
		if req.IPv4Endpoint && !a.Is4() {
			t.Fatalf("%q: IPv6 endpoint %s", c.ClusterID, c.Endpoint)
		}
		if len(c.Subnets) == 0 {
			t.Fatalf("%q: no subnets", c.ClusterID)
		}
		for j, p := range c.Subnets {
			if !p.IsValid() || p != p.Masked() || p.Bits() == 0 {
				t.Fatalf("%q: bad subnet %s", c.ClusterID, p)
			}
			if j > 0 && comparePrefix(c.Subnets[j-1], p) >= 0 {
				t.Fatalf("%q: subnets not sorted and deduplicated: %v", c.ClusterID, c.Subnets)
			}
			if o, ok := owner[p]; ok {
				t.Fatalf("subnet %s in the connections of %q and %q", p, o, c.ClusterID)
			}
			owner[p] = c.ClusterID
		}
		if !SamePrefixes(c.Subnets, slices.Compact(sortedPrefixes(asked[c.ClusterID][0].Subnets))) {
			t.Fatalf("%q: subnets %v, asked for %v", c.ClusterID, c.Subnets, asked[c.ClusterID][0].Subnets)
		}
	}
	// Every connection asked for is returned or rejected.
	n := len(got) + len(rejected)
	if n != len(in) {
		t.Fatalf("%d connections asked for, %d returned and %d rejected (%q)", len(in), len(got), len(rejected), rejected)
	}
}

func sortedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, comparePrefix)
	return out
}

// Found by FuzzValidate (seed bad_fields): the IPv4-mapped unspecified
// address passed the unspecified-endpoint check and was returned, unmapped,
// as 0.0.0.0.
func TestValidateMappedUnspecifiedEndpoint(t *testing.T) {
	c := Connection{ClusterID: "c2", Endpoint: netip.MustParseAddrPort("[::ffff:0.0.0.0]:4500"), Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}}
	if got, err := Validate([]Connection{c}, Requirements{}); len(got) != 0 || err == nil {
		t.Fatalf("Validate = %v, %v; want c2 rejected", got, err)
	}
}
