//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/test/testbed"
)

// A driven post-copy gives the target's QEMU a recovery monitor whose
// arguments stay in the guest's live XML. A QEMU started again from that
// XML (a restore, a create from a dump) makes the monitor in the socket
// dir, where any QEMU of the node could reach it: it is moved out of
// reach as soon as it appears, and the guest starts all the same.
func TestAMonitorMadeAgainFromALiveXMLIsHiddenAtOnce(t *testing.T) {
	const name = "monitor-again"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8})
	err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: holdMiBs,
		PostCopyAfter: 2 * time.Second})
	if err != nil {
		t.Fatalf("the post-copy migration failed: %v", err)
	}
	var live string
	withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			live, err = l.DomainGetXMLDesc(dom, 0)
		}
		if err == nil {
			err = l.DomainDestroy(dom)
		}
		return err
	})
	if !strings.Contains(live, "ferry-recovery") {
		t.Fatalf("the target's live XML carries no recovery monitor; nothing to test:\n%s", live)
	}
	withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
		_, err := l.DomainCreateXML(live, 0)
		return err
	})
	created := time.Now()
	var listing string
	waitFor(t, "the monitor made again moved out of the socket dir", 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := bed.Exec(ctx, "b", "sh", "-c", "cd /run/ferry/migrationproxy && ls -A . && echo -- && ls -A .monitors").Output()
		listing = string(out)
		top, hidden, _ := strings.Cut(listing, "--")
		return err == nil && !strings.Contains(top, "-qmp.sock") && strings.Contains(hidden, "-qmp.sock")
	})
	t.Logf("moved within %v: %s", time.Since(created).Round(time.Millisecond), strings.Join(strings.Fields(listing), " "))
	withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainDestroy(dom)
		}
		return err
	})
}
