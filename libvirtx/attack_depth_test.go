package libvirtx

import (
	"runtime"
	"strings"
	"testing"
)

// deepXML nests depth unknown elements named name outside <metadata>:
// libvirtxml skips them and the sweep allows them.
func deepXML(depth int, name string) string {
	nest := strings.Repeat("<"+name+">", depth) + strings.Repeat("</"+name+">", depth)
	return strings.Replace(guestXML("vm", "", ""), "<resource>", nest+"<resource>", 1)
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A peer's XML of thousands of nested tags, under the tag and attribute
// caps, had the check keep every element's full path: depth 2,000 of
// 200-byte names allocated 787 MiB before the refusal, and the largest
// request under the caps some 9 GiB. It is refused now from its tags
// alone, for its depth or its names' length.
func TestAttackDeepXMLIsRefusedBeforeItCosts(t *testing.T) {
	for _, c := range []struct {
		name  string
		depth int
		want  string
	}{
		{"z", 2000, "nests deeper"},
		{strings.Repeat("z", 200), 10, "name is longer"},
	} {
		var err error
		cost := allocated(func() { err = CheckIncomingXML(deepXML(c.depth, c.name), "vm", policyForTest) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d deep of %d-byte names: %v; want it refused (%s)", c.depth, len(c.name), err, c.want)
		}
		if cost > 8<<20 {
			t.Errorf("%d deep of %d-byte names: refusing it allocated %d MiB", c.depth, len(c.name), cost>>20)
		}
	}
	if err := CheckIncomingXML(deepXML(maxDomainDepth-4, "z"), "vm", policyForTest); err != nil && strings.Contains(err.Error(), "nests deeper") {
		t.Errorf("a domain %d deep was refused for its depth: %v", maxDomainDepth-2, err)
	}
}

// What survives re-marshalling is compared by interned paths, so its cost
// follows the tags, not their depth times their number.
func TestLosslessCheckCostsTheTagsNotTheirDepth(t *testing.T) {
	x := deepXML(9000, "z")
	cost := allocated(func() { lostInRemarshal(x, x) })
	if cost > 32<<20 {
		t.Errorf("comparing the paths of a document 9,000 deep allocated %d MiB", cost>>20)
	}
	err := lostInRemarshal(strings.Replace(deepXML(2, "zz"), "<zz><zz>", `<zz><zz at="1">`, 1), guestXML("vm", "", ""))
	if err == nil || !strings.Contains(err.Error(), "<domain/zz>") {
		t.Errorf("a path lost in re-marshalling: %v; want it named <domain/zz>", err)
	}
	err = lostInRemarshal(strings.Replace(guestXML("vm", "", ""), "<resource>", `<resource zz="1">`, 1), guestXML("vm", "", ""))
	if err == nil || !strings.Contains(err.Error(), "<domain/resource @zz>") {
		t.Errorf("an attribute lost in re-marshalling: %v; want it named <domain/resource @zz>", err)
	}
}
