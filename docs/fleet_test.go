package docs_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/completiond/completiond/internal/fleet"
)

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestFleetClusterSlots: fleet.md lists the hash slots of the shards'
// tags ({s0} … {sN}) as Redis computes them, and says how many shards
// there are.
func TestFleetClusterSlots(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 { // the CRC's check value
		t.Fatalf("crc16 check %#x", got)
	}
	b, err := os.ReadFile("fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	slots := make([]string, fleet.ClusterShards)
	for n := range slots {
		slots[n] = fmt.Sprint(crc16(fmt.Sprint("s", n)) % 16384)
	}
	if want := strings.Join(slots, ", "); !strings.Contains(doc, want) {
		t.Errorf("fleet.md does not list the shards' slots %s", want)
	}
	if want := fmt.Sprintf("split into **%d shards**", fleet.ClusterShards); !strings.Contains(doc, want) {
		t.Errorf("fleet.md does not say %q", want)
	}
}
