package bpf_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/causeway-net/causeway/bpf"
)

// XDP verdicts from enum xdp_action in linux/bpf.h.
const (
	xdpDrop = 1
	xdpPass = 2
)

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoICMP     = 1
	protoTCP      = 6
	protoUDP      = 17
)

// frame builds an Ethernet frame with the given EtherType and payload.
func frame(etherType uint16, payload []byte) []byte {
	b := []byte{
		0x02, 0, 0, 0, 0, 0x02, // destination MAC
		0x02, 0, 0, 0, 0, 0x01, // source MAC
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, payload...)
}

// ipv4 builds an IPv4 header (no options unless ihl > 5) followed by payload.
// The checksum is left zero: the program does not check it.
func ipv4(proto uint8, ihl uint8, fragOff uint16, payload []byte) []byte {
	src := netip.MustParseAddr("10.0.0.1").As4()
	dst := netip.MustParseAddr("10.0.0.2").As4()
	hdrLen := int(ihl) * 4
	b := []byte{0x40 | ihl, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(max(hdrLen, 20)+len(payload)))
	b = binary.BigEndian.AppendUint16(b, 1) // identification
	b = binary.BigEndian.AppendUint16(b, fragOff)
	b = append(b, 64, proto, 0, 0) // TTL, protocol, checksum
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	for len(b) < hdrLen {
		b = append(b, 1) // IPOPT_NOOP
	}
	return append(b, payload...)
}

// l4ports builds the first 8 bytes of a UDP or TCP header (ports first in both).
func l4ports(srcPort, dstPort uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, srcPort)
	b = binary.BigEndian.AppendUint16(b, dstPort)
	return append(b, 0, 8, 0, 0)
}

func TestPktCountVerdictsAndCounters(t *testing.T) {
	requireBPF(t)

	const dropPort = 9999
	spec, err := bpf.LoadPktCount()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[bpf.PktCountVarDropUdpPort].Set(uint16(dropPort)); err != nil {
		t.Fatalf("set drop_udp_port: %v", err)
	}
	var objs bpf.PktCountObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load pktcount: %+v", err)
	}
	t.Cleanup(func() { _ = objs.Close() })

	tests := []struct {
		name    string
		pkt     []byte
		verdict uint32
		proto   int // IPv4 protocol whose counter goes up; -1 for none
	}{
		{"udp to other port passes", frame(etherTypeIPv4, ipv4(protoUDP, 5, 0, l4ports(4000, 53))), xdpPass, protoUDP},
		{"udp to drop port is dropped", frame(etherTypeIPv4, ipv4(protoUDP, 5, 0, l4ports(4000, dropPort))), xdpDrop, protoUDP},
		{"udp with ip options to drop port is dropped", frame(etherTypeIPv4, ipv4(protoUDP, 6, 0, l4ports(4000, dropPort))), xdpDrop, protoUDP},
		{"non-first udp fragment passes", frame(etherTypeIPv4, ipv4(protoUDP, 5, 100, l4ports(4000, dropPort))), xdpPass, protoUDP},
		{"truncated udp header is dropped", frame(etherTypeIPv4, ipv4(protoUDP, 5, 0, []byte{0x0f, 0xa0})), xdpDrop, protoUDP},
		{"tcp to drop port passes", frame(etherTypeIPv4, ipv4(protoTCP, 5, 0, l4ports(4000, dropPort))), xdpPass, protoTCP},
		{"icmp passes", frame(etherTypeIPv4, ipv4(protoICMP, 5, 0, []byte{8, 0, 0, 0, 0, 1, 0, 1})), xdpPass, protoICMP},
		{"ipv6 passes uncounted", frame(etherTypeIPv6, make([]byte, 40)), xdpPass, -1},
		{"truncated ipv4 header is dropped", frame(etherTypeIPv4, make([]byte, 10)), xdpDrop, -1},
		{"ipv4 ihl below 5 is dropped", frame(etherTypeIPv4, ipv4(protoUDP, 4, 0, l4ports(4000, 53))), xdpDrop, -1},
	}

	want := map[uint32]uint64{}
	for _, tt := range tests {
		got, err := objs.CountPackets.Run(&ebpf.RunOptions{Data: tt.pkt})
		if err != nil {
			t.Fatalf("%s: run: %v", tt.name, err)
		}
		if got != tt.verdict {
			t.Errorf("%s: verdict %d, want %d", tt.name, got, tt.verdict)
		}
		if tt.proto >= 0 {
			want[uint32(tt.proto)]++
		}
	}

	for proto := uint32(0); proto < 256; proto++ {
		var got uint64
		if err := objs.ProtoPackets.Lookup(proto, &got); err != nil {
			t.Fatalf("lookup counter for protocol %d: %v", proto, err)
		}
		if got != want[proto] {
			t.Errorf("protocol %d: counted %d packets, want %d", proto, got, want[proto])
		}
	}
}
