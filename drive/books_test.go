package drive

import (
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
)

// The books keep one account per migration, numbered so that the record
// tells one from the next of the name, and keep an ended one only while
// the record may still need it.
func TestBooksNumberEachMigrationAndDropWhatIsDone(t *testing.T) {
	b := recordOnly(migration.Config{Node: "a"}).Books
	b.Drive("s", "vm", api.ProxyInfo{MigrationID: "m-1"})
	first, _ := b.Driving("s", "vm")
	b.Undrive("s", "vm")
	if _, ok := b.Driving("s", "vm"); ok {
		t.Fatal("an account never ended outlived Undrive")
	}
	b.Drive("s", "vm", api.ProxyInfo{MigrationID: "m-2"})
	b.DriveRecoverable("s", "vm", time.Minute)
	b.DriveEnded("vm", libvirt.Domain{Name: "vm"}, "s", time.Now(), api.ProxyInfo{MigrationID: "m-2"}, "")
	second, ok := b.Driving("s", "vm")
	if !ok || second.Number == first.Number || !second.Ended || !second.Completed || second.RecoverFor != time.Minute {
		t.Fatalf("the second migration's account is %+v (first %d)", second, first.Number)
	}
	b.Undrive("s", "vm")
	if _, ok := b.Driving("s", "vm"); !ok {
		t.Fatal("Undrive dropped an ended account the record may not have read")
	}
	// A settled end of the same name is a migration of its own.
	b.DriveSettled("s", "vm", "", time.Now(), api.ProxyInfo{}, api.PhaseFailed, "stopped")
	if third, _ := b.Driving("s", "vm"); third.Number == second.Number || !third.Settled || third.Failure != "stopped" {
		t.Fatalf("a settled end took the ended account %+v", third)
	}
	b.mu.Lock()
	b.pruneLocked(time.Now().Add(keepEnded + time.Minute))
	b.mu.Unlock()
	if _, ok := b.Driving("s", "vm"); ok {
		t.Fatal("an ended account was kept past keepEnded")
	}
}

// A prepare is forgotten only by its own id: a cancel of an older
// migration does not drop the next one's.
func TestBooksForgetAPrepareByItsOwnID(t *testing.T) {
	b := NewBooks()
	b.ExpectIncoming("s", "vm", "m-2", "a")
	b.IncomingRecoverable("s", "vm", "m-1", time.Minute)
	b.ForgetIncoming("s", "vm", "m-1")
	p, ok := b.Preparing("s", "vm")
	if !ok || p.ID != "m-2" || p.PeerNode != "a" || p.RecoverFor != 0 {
		t.Fatalf("the prepare is %+v, %v; want m-2 from a, not recoverable", p, ok)
	}
	b.ForgetIncoming("s", "vm", "m-2")
	if _, ok := b.Preparing("s", "vm"); ok {
		t.Fatal("a prepare outlived its own ForgetIncoming")
	}
}
