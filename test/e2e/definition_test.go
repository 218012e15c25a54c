//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/test/testbed"
)

// withLibvirt runs f on a fresh connection to node's libvirtd.
func withLibvirt(t *testing.T, node string, f func(*libvirt.Libvirt) error) {
	t.Helper()
	l, err := bed.Libvirt(node)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	if err := f(l); err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
}

// definition is what a node's libvirt holds of a guest's definition.
type definition struct {
	defined, autostart bool
	xml                string // the inactive definition
}

func definitionOn(t *testing.T, node, name string) definition {
	t.Helper()
	var d definition
	withLibvirt(t, node, func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if libvirt.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		p, err := l.DomainIsPersistent(dom)
		if err != nil || p != 1 {
			return err
		}
		d.defined = true
		a, err := l.DomainGetAutostart(dom)
		if err != nil {
			return err
		}
		d.autostart = a == 1
		d.xml, err = l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
		return err
	})
	return d
}

// bootLibvirtd has node's libvirtd start as after a boot, autostarting
// what it holds.
func bootLibvirtd(t *testing.T, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bed.BootLibvirtd(ctx, node); err != nil {
		t.Fatal(err)
	}
	// libvirtd answers before its autostart of a guest has spawned QEMU.
	time.Sleep(3 * time.Second)
}

// oneQEMU fails unless exactly one QEMU process of the guest runs on the
// machine, whichever libvirt knows of it.
func oneQEMU(t *testing.T, name string) {
	t.Helper()
	n, err := testbed.QEMUCount(name)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d QEMU processes of %s run, want exactly one", n, name)
	}
}

// Node b cannot write its config dir (a full or read-only root): the
// guest must not run there. libvirt's Finish on b fails to save the
// definition and stops b's copy before its vCPUs start, so the migration
// fails and the guest runs on a alone, autostart on again, one QEMU on
// the machine. (Before, b's ferryd defined the running guest after
// Finish: libvirt dropped it from its list while its QEMU ran on, the
// migration said Completed, and a's boot started a second copy.)
func TestATargetThatCannotKeepTheDefinitionNeverRunsTheGuest(t *testing.T) {
	const name = "rocfg"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Persistent: true, Verify: true})
	autostartOn(t, "a", name)
	restore, err := bed.ReadOnlyLibvirtConfig("b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("making b's config dir writable again: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := verifiedSoFar(t, name)
	err = bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	if err == nil {
		t.Fatal("the migration completed to a node that cannot keep the guest's definition")
	}
	t.Logf("the migration failed, as it must: %v", err)
	onlyOn(t, name, "a", "b")
	memoryIntact(t, name, before)
	oneQEMU(t, name)
	if d := definitionOn(t, "b", name); d.defined {
		t.Errorf("node b holds a definition of %s it could not save", name)
	}
	waitFor(t, "a's autostart of the guest back on", 30*time.Second, func() bool {
		d := definitionOn(t, "a", name)
		return d.defined && d.autostart
	})
	// b boots: it holds nothing of the guest to start.
	bootLibvirtd(t, "b")
	oneQEMU(t, name)
	onlyOn(t, name, "a", "b")
}

// Node b already holds an inactive definition of the guest (left by a
// migration with libvirt's own client, --persistent without
// --undefinesource), and b's ferryd is killed after a's Perform and before
// b's Finish. libvirt on b stops the incoming guest, which never ran there
// (shut off, destroyed), and keeps the old definition. b's restarted
// ferryd must say the guest stopped there, not that it ran: a resumes its
// copy, whole, the one QEMU of the guest. (Before, b called any shut-off
// incoming guest "running" unless libvirt said failed, and a's Confirm
// stopped the only copy.)
func TestATargetKilledBeforeTheFinishOverAnOldDefinitionLeavesTheGuestOnItsSource(t *testing.T) {
	const name = "olddef"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Persistent: true, Verify: true})
	definedOnB(t, name)
	// An operator's definition on every node: b is let adopt it.
	adoptDefinedOn(t, "b")
	before, done := migrationHeldBeforeFinish(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.CrashFerryd(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the migration completed though the target's copy never ran")
	}
	onlyOn(t, name, "a", "b")
	memoryIntact(t, name, before)
	oneQEMU(t, name)
	if d := definitionOn(t, "b", name); !d.defined {
		t.Error("node b lost the definition it held before the migration")
	}
	got, err := readNodeTruth("b", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirt on b: %s", got)
}

// a's libvirtd restarts while a's migration of a persistent guest with
// autostart is held between its Perform and the finish (the guest paused
// here, whole, and not yet run on b). libvirt drops the migration's job
// with the connection that performed it, and the restarted libvirtd
// resumes the guest on a by itself. So a must not hand the guest to b:
// the migration is cancelled, b drops its copy, the guest runs on a alone
// with its memory whole, its definition and autostart as before, and
// nothing is left for a restart of ferryd to do. Then a boots: one QEMU.
// (Before, b finished the migration and ran the guest beside a's copy.)
func TestASourceLibvirtdRestartBeforeTheFinishKeepsTheGuestOnItsSource(t *testing.T) {
	const name = "srcfin"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Persistent: true, Verify: true})
	autostartOn(t, "a", name)
	before, done := migrationHeldBeforeFinish(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.RestartLibvirtd(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the migration completed though a's libvirt had dropped its job")
	}
	waitFor(t, "the guest running on a, and a's autostart back on", 2*time.Minute, func() bool {
		got, err := readNodeTruth("a", name)
		d := definitionOn(t, "a", name)
		return err == nil && got.running() && d.defined && d.autostart
	})
	onlyOn(t, name, "a", "b")
	memoryIntact(t, name, before)
	oneQEMU(t, name)
	if d := definitionOn(t, "b", name); d.defined {
		t.Error("node b holds a definition of a guest that never ran there")
	}
	waitFor(t, "a's record of the migration settled", time.Minute, func() bool {
		dir := filepath.Join(bed.Node("a").Dir, "state", "driven-migrations")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && strings.Contains(string(b), `"domain":"`+name+`"`) {
				return false
			}
		}
		return true
	})
	bootLibvirtd(t, "a")
	oneQEMU(t, name)
	onlyOn(t, name, "a", "b")
}

// migrationHeldBeforeFinish starts a driven migration of name from a to
// b that a's ferryd holds between Perform and the finish (a fault), and
// returns once it is held: the guest's memory checks so far, and the
// migration's end.
func migrationHeldBeforeFinish(t *testing.T, name string) (int, <-chan error) {
	t.Helper()
	withFaults(t, "a", faults.PauseBeforeFinish)
	before := verifiedSoFar(t, name)
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	waitFor(t, "a's migration held between its Perform and the finish", 2*time.Minute, func() bool {
		return ferrydLogLine("a", `"domain":"`+name+`"`, "fault injected: pausing before the finish")
	})
	return before, done
}

// autostartOn turns the guest's autostart on, on node.
func autostartOn(t *testing.T, node, name string) {
	t.Helper()
	withLibvirt(t, node, func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainSetAutostart(dom, 1)
		}
		return err
	})
}

// adoptDefinedOn restarts node's ferryd letting migrations in take over
// a shut-off definition, until the test ends.
func adoptDefinedOn(t *testing.T, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.SetNodeFerrydArgs(ctx, node, "--migration-adopt-defined"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := bed.SetNodeFerrydArgs(ctx, node); err != nil {
			t.Errorf("restoring %s's ferryd: %v", node, err)
		}
	})
}

// definedOnB defines on node b, shut off, the definition a holds of
// guest name, until the test ends.
func definedOnB(t *testing.T, name string) {
	t.Helper()
	var config string
	withLibvirt(t, "a", func(l *libvirt.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			config, err = l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive|libvirt.DomainXMLMigratable)
		}
		return err
	})
	withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
		_, err := l.DomainDefineXML(config)
		return err
	})
	t.Cleanup(func() {
		withLibvirt(t, "b", func(l *libvirt.Libvirt) error {
			if dom, err := l.DomainLookupByName(name); err == nil {
				l.DomainDestroy(dom)
				return l.DomainUndefine(dom)
			}
			return nil
		})
	})
}
