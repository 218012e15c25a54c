package libvirtx

import (
	"runtime"
	"strings"
	"testing"
)

// Attributes cost the parser far more than their bytes: 2 MiB of them in
// <metadata>, under the tag cap, cost some 350 MiB of allocation per
// check. A peer sends them at the rate it likes; a domain with more
// attributes than any real one is refused before it is parsed, and the
// refusal costs next to nothing.
func TestAttackAttributesInMetadataAreRefusedCheaply(t *testing.T) {
	var attrs strings.Builder
	for i := 0; attrs.Len() < 2<<20-4096; i++ {
		attrs.WriteString(" a")
		attrs.WriteString(strings.Repeat("x", i%7))
		attrs.WriteString(itoa(i))
		attrs.WriteString("=''")
	}
	x := strings.Replace(guestXML("vm", "", ""), "<metadata>", "<metadata><f:x xmlns:f='urn:f'"+attrs.String()+"/>", 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := CheckIncomingXML(x, "vm", policyForTest)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "attributes, more than any domain's") {
		t.Fatalf("%d bytes of attributes: %v", len(x), err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("refusing %d bytes of attributes allocated %d MiB", len(x), got>>20)
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}
