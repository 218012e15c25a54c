//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/faults"
	"github.com/ferry-vm/ferry/test/testbed"
)

// The guest's definition is changed (its metadata set) while a migration
// is held between libvirt's Begin, whose XML the target is built from, and
// Perform. libvirt's change protection refuses the change, or the target
// carries it: never is the guest migrated from a definition gone stale.
func TestADefinitionChangedAfterBeginIsNotMigratedStale(t *testing.T) {
	const name = "changeprot"
	withFaults(t, "a", faults.PauseAfterBegin)
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 32, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	done := migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	for end := time.Now().Add(time.Minute); !ferrydLogSays("a", "fault injected: pausing between Begin and Prepare"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the migration never paused after Begin")
		}
	}
	l, err := bed.Libvirt("a")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	const uri = "http://ferry.example/test"
	changed := make(chan error, 1)
	go func() {
		changed <- l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{"<changed/>"},
			libvirt.OptString{"ft"}, libvirt.OptString{uri}, libvirt.DomainAffectLive)
	}()
	if err := <-done; err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	cerr := <-changed
	t.Logf("the definition change during the migration: %v", cerr)
	onlyOn(t, name, "b", "a")
	lb, err := bed.Libvirt("b")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Disconnect()
	there, err := lb.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	xml, err := lb.DomainGetXMLDesc(there, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cerr == nil && !strings.Contains(xml, uri) {
		t.Fatalf("the change was taken on a during the migration, and the guest on b runs without it: migrated stale")
	}
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}
