package drive

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// While ferryd runs, a given-up record goes once libvirt says its guest
// is no longer held here in post-copy, and stays while it is held or
// while libvirt cannot be asked.
func TestTheSweepForgetsAGivenUpRecordOnlyOnLibvirtsWord(t *testing.T) {
	held, c1, r1 := givenUpGuest(t, 1)
	destroyed, c2, r2 := givenUpGuest(t, 2)
	failing, c3, r3 := givenUpGuest(t, 3)
	destroyed.RemoveDomain("vm")
	failing.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainLookupByName {
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "internal error"}, true
		}
		return nil, nil, false
	})
	s := rearmSource(t, map[string]*libvirtx.Conn{r1.Socket: c1, r2.Socket: c2, r3.Socket: c3}, r1, r2, r3)
	s.sweepGivenUpOnce(context.Background(), map[string]time.Time{}, time.Now())
	if !recordKept(t, s, r1.ID) {
		t.Error("the record of a guest still held in post-copy was forgotten")
	}
	if recordKept(t, s, r2.ID) {
		t.Error("the record of a guest destroyed since stayed")
	}
	if !recordKept(t, s, r3.ID) {
		t.Error("a lookup that failed was taken for a guest gone")
	}
	if len(held.Calls(libvirtxtest.ProcDomainLookupByName)) == 0 {
		t.Error("the held guest's libvirt was never asked")
	}
}

// A record whose socket is missing goes once it has been missing for
// socketGoneFor across sweeps, not before, and never while the socket's
// file is there.
func TestTheSweepForgetsARecordWhoseSocketStaysGone(t *testing.T) {
	_, _, r := givenUpGuest(t, 1)
	r.Socket = filepath.Join(t.TempDir(), "gone.sock")
	s := rearmSource(t, nil, r)
	missing := map[string]time.Time{}
	now := time.Now()
	s.sweepGivenUpOnce(context.Background(), missing, now)
	s.sweepGivenUpOnce(context.Background(), missing, now.Add(socketGoneFor-time.Second))
	if !recordKept(t, s, r.ID) {
		t.Fatal("a record went before its socket was missing for socketGoneFor")
	}
	if err := os.WriteFile(r.Socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.sweepGivenUpOnce(context.Background(), missing, now.Add(socketGoneFor+time.Second))
	if !recordKept(t, s, r.ID) {
		t.Fatal("a record went while its socket's file was there")
	}
	os.Remove(r.Socket)
	later := now.Add(2 * socketGoneFor)
	s.sweepGivenUpOnce(context.Background(), missing, later)
	s.sweepGivenUpOnce(context.Background(), missing, later.Add(socketGoneFor-time.Second))
	if !recordKept(t, s, r.ID) {
		t.Fatal("the socket's time missing was not counted again from its return")
	}
	s.sweepGivenUpOnce(context.Background(), missing, later.Add(socketGoneFor))
	if recordKept(t, s, r.ID) {
		t.Error("the record of a socket gone for socketGoneFor stayed")
	}
}

// A record whose domain's key is held (its recovery started again, or a
// start of ferryd deciding) is not the sweep's.
func TestTheSweepLeavesARecordWhoseKeyIsHeld(t *testing.T) {
	destroyed, c, r := givenUpGuest(t, 1)
	destroyed.RemoveDomain("vm")
	s := rearmSource(t, map[string]*libvirtx.Conn{r.Socket: c}, r)
	key := driveKey(r.Socket, r.Domain)
	if !s.running.start(key) {
		t.Fatal("key taken")
	}
	s.sweepGivenUpOnce(context.Background(), map[string]time.Time{}, time.Now())
	s.running.end(key)
	if !recordKept(t, s, r.ID) {
		t.Error("the sweep forgot a record whose key another holds")
	}
}

// At a start of ferryd too, a lookup that fails says nothing of the
// guest: its given-up record stays.
func TestAStartKeepsAGivenUpRecordWhenLibvirtCannotTell(t *testing.T) {
	failing, c, r := givenUpGuest(t, 1)
	failing.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainLookupByName {
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "internal error"}, true
		}
		return nil, nil, false
	})
	s := rearmSource(t, map[string]*libvirtx.Conn{r.Socket: c}, r)
	s.keepGivenUp(context.Background(), r)
	if !recordKept(t, s, r.ID) {
		t.Error("a start of ferryd forgot a given-up record on a lookup that failed")
	}
}

// A guest no longer held whose definition cannot be settled (its libvirt
// fails the calls that settle it) keeps its record for the next sweep,
// which tries once more itself: no sweep leaves a retrier behind.
func TestTheSweepLeavesNoRetrierBehind(t *testing.T) {
	f, c, r := givenUpGuest(t, 1)
	r.Flags |= uint32(libvirt.MigratePersistDest)
	f.SetState("vm", int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
	s := rearmSource(t, map[string]*libvirtx.Conn{r.Socket: c}, r)
	before := goroutinesIn("settleDefinitionLater")
	for i := range 5 {
		s.sweepGivenUpOnce(context.Background(), map[string]time.Time{}, time.Now().Add(time.Duration(i)*givenUpSweepEvery))
	}
	if !recordKept(t, s, r.ID) {
		t.Error("a record went with its definition not settled")
	}
	if n := goroutinesIn("settleDefinitionLater") - before; n != 0 {
		t.Errorf("%d retriers left behind by 5 sweeps, want none", n)
	}
}

// goroutinesIn counts the goroutines with fn on their stack.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<22)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// The sweep lists the records, then takes each one's key: a record its
// recovery settled and forgot in between (ferryctl recover's, completed)
// is not settled again from the sweep's stale copy.
func TestTheSweepSkipsARecordForgottenSinceItsListing(t *testing.T) {
	first, c1, r1 := givenUpGuest(t, 1)
	destroyed, c2, r2 := givenUpGuest(t, 2)
	destroyed.RemoveDomain("vm")
	var s *Source
	asked := false
	first.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcDomainLookupByName && !asked {
			asked = true
			s.forgetDrive(r2.ID) // r2's recovery ended and settled meanwhile
		}
		return nil, nil, false
	})
	s = rearmSource(t, map[string]*libvirtx.Conn{r1.Socket: c1, r2.Socket: c2}, r1, r2)
	s.sweepGivenUpOnce(context.Background(), map[string]time.Time{}, time.Now())
	if !asked {
		t.Fatal("the first record's libvirt was not asked")
	}
	if n := len(destroyed.Calls(libvirtxtest.ProcDomainLookupByName)); n != 0 {
		t.Errorf("the sweep asked libvirt %d times about a record forgotten since its listing", n)
	}
}
