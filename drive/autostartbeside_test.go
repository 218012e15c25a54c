package drive

import (
	"context"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
	"github.com/ferry-vm/ferry/peer"
)

// the target runs the guest (its word: Running); this node's copy
// was found running too (left for an operator), and the operator paused it
// (virsh suspend) to stop the two from diverging. applyUntilDone's next
// try takes that pause as settled ("left as it is"), and the settling that
// follows turns the paused copy's autostart back on: after this node's
// next boot, libvirt starts a second copy of a guest that runs on the
// target.
func TestAPausedCopyBesideARunningTargetKeepsItsAutostartOff(t *testing.T) {
	f, c, r := handoverGuest(t, int32(libvirtx.StatePaused), int32(libvirt.DomainPausedUser))
	const procIsPersistent, procSetAutostart = 151, 29
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case procIsPersistent:
			return libvirtxtest.Words(1), nil, true
		case procSetAutostart:
			return nil, nil, true
		}
		return nil, nil, false
	})
	what, err := applyOutcome(context.Background(), c, r, peer.OutcomeRunning)
	t.Logf("applyOutcome(Running) on a copy paused by an operator: %q, %v", what, err)
	r.Autostart, r.Flags = true, uint32(libvirt.MigratePersistDest)
	what, err = settleDefinition(context.Background(), c, r, true)
	t.Logf("settleDefinition(target runs it, defined there): %q, %v; SetAutostart calls %d", what, err, len(f.Calls(procSetAutostart)))
	if err == nil && len(f.Calls(procSetAutostart)) > 0 {
		t.Errorf("the guest runs on the target, yet this node's paused copy had its autostart turned back on")
	}
}
