// Package evacuatetest holds what the tests of a plan share, in evacuate/
// over fakes and in daemon/ through the routes and real connections.
package evacuatetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// CheckHostilePlan checks a plan of a normal guest whose one disk is
// 10 GiB and a hostile one whose disks' sizes were never answered: the
// normal guest is planned, the hostile one is reported as not measured,
// naming itself and the call it left unanswered, and is not planned.
func CheckHostilePlan(t *testing.T, entries []api.PlanEntry, normal, hostile string) {
	t.Helper()
	byName := map[string]api.PlanEntry{}
	for _, e := range entries {
		byName[e.Domain] = e
	}
	if e, ok := byName[normal]; !ok || e.Error != "" || !e.Migratable || e.Prediction == nil {
		t.Errorf("the normal guest is not planned: %+v (present %v)", e, ok)
	} else if len(e.Blockers) != 1 || e.Blockers[0].SizeBytes != 10<<30 {
		t.Errorf("the normal guest's disk size is not reported: %+v", e.Blockers)
	}
	e, ok := byName[hostile]
	if !ok {
		t.Fatalf("the hostile domain is missing from the plan: %+v", entries)
	}
	for _, want := range []string{"not measured", hostile, "block info"} {
		if !strings.Contains(e.Error, want) {
			t.Errorf("the hostile domain's error %q does not say %q", e.Error, want)
		}
	}
	if e.Migratable || e.Prediction != nil || e.Target != "" {
		t.Errorf("the hostile domain, not measured, is planned to move: %+v", e)
	}
}

// GuestXML is a KVM guest with n disks, each a file of its launcher pod's.
func GuestXML(name string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<domain type='kvm'><name>%s</name><memory unit='KiB'>1048576</memory><devices>", name)
	for i := range n {
		fmt.Fprintf(&b, "<disk type='file' device='disk'><source file='/var/run/kubevirt-private/vmi-disks/d%d/disk.img'/><target dev='vd%c%c' bus='virtio'/></disk>",
			i, 'a'+i/26, 'a'+i%26)
	}
	b.WriteString("</devices></domain>")
	return b.String()
}
