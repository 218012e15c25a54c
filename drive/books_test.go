package drive

import (
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

// unread is a record that is told of the books' changes and reads nothing
// of them: what the books keep is theirs alone.
type unread struct{ Show }

func (unread) DriveBegan(string, string)                      {}
func (unread) DriveEnded(string, libvirt.Domain, string)      {}
func (unread) DriveSettled(string, string, string, api.Phase) {}

// The books keep one account per migration, numbered so that the record
// tells one from the next of the name; an ended migration's account is
// kept until a job that ended has shown it, and let go then.
func TestBooksKeepAnAccountUntilItsEndIsShown(t *testing.T) {
	b := NewBooks()
	b.ShowOn(unread{})
	b.Drive("s", "vm", api.ProxyInfo{MigrationID: "m-1"})
	first, _ := b.Driving("s", "vm")
	b.Undrive("s", "vm")
	if _, ok := b.Driving("s", "vm"); ok {
		t.Fatal("an account never ended outlived Undrive")
	}
	b.Drive("s", "vm", api.ProxyInfo{MigrationID: "m-2"})
	b.DriveRecoverable("s", "vm", time.Minute)
	second, _ := b.Driving("s", "vm")
	b.Shown("s", "vm", second.Number) // its job ended before the driver did
	if d, ok := b.Driving("s", "vm"); !ok || !d.Shown {
		t.Fatalf("an account shown before its end is %+v, %v; want kept, shown", d, ok)
	}
	b.DriveEnded("vm", libvirt.Domain{Name: "vm"}, "s", time.Now(), api.ProxyInfo{MigrationID: "m-2"}, "")
	d, ok := b.Driving("s", "vm")
	if !ok || d.Number == first.Number || d.Number != second.Number || !d.Ended || !d.Completed || d.RecoverFor != time.Minute {
		t.Fatalf("the second migration's account is %+v (first %d)", d, first.Number)
	}
	b.Undrive("s", "vm")
	b.Shown("s", "vm", first.Number)
	if _, ok := b.Driving("s", "vm"); !ok {
		t.Fatal("an ended account was dropped by Undrive, or by another account's Shown")
	}
	b.Shown("s", "vm", second.Number)
	if _, ok := b.Driving("s", "vm"); ok {
		t.Fatal("an ended account was kept after its end was shown")
	}
	// A settled end of a name with no account is a migration of its own.
	b.DriveSettled("s", "vm", "", time.Now(), api.ProxyInfo{}, api.PhaseFailed, "stopped")
	if third, _ := b.Driving("s", "vm"); third.Number == second.Number || !third.Settled || third.Failure != "stopped" {
		t.Fatalf("a settled end is %+v", third)
	}
}

// A prepare is let go only by its own id: the end of an older migration's
// job, or a cancel of it, does not drop the next one's.
func TestBooksLetAPrepareGoByItsOwnID(t *testing.T) {
	b := NewBooks()
	b.ExpectIncoming("s", "vm", "m-2", "a")
	b.IncomingRecoverable("s", "vm", "m-1", time.Minute)
	b.ForgetIncoming("s", "vm", "m-1")
	b.IncomingEnded("s", "vm", "m-1")
	p, ok := b.Preparing("s", "vm")
	if !ok || p.ID != "m-2" || p.PeerNode != "a" || p.RecoverFor != 0 {
		t.Fatalf("the prepare is %+v, %v; want m-2 from a, not recoverable", p, ok)
	}
	b.IncomingEnded("s", "vm", "m-2")
	if _, ok := b.Preparing("s", "vm"); ok {
		t.Fatal("a prepare outlived its job's end")
	}
}
