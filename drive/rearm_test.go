package drive

import (
	"fmt"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// givenUpGuest is a fake libvirt on its own socket, holding vm paused in
// a failed post-copy, and the given-up record of that post-copy, numbered
// n.
func givenUpGuest(t *testing.T, n int) (*libvirtxtest.Server, *libvirtx.Conn, drivenRecord) {
	t.Helper()
	state, reason := heldPaused()
	f, c, r := settleGuest(t, state, reason, nowhere(t), uint32(libvirt.MigratePostcopy))
	r.ID = fmt.Sprintf("m-%016x", n)
	r.GivenUp = true
	return f, c, r
}

func heldPaused() (int32, int32) {
	return int32(libvirtx.StatePaused), int32(libvirt.DomainPausedPostcopyFailed)
}

// rearmSource records rs on a Source whose pool has conns.
func rearmSource(t *testing.T, conns map[string]*libvirtx.Conn, rs ...drivenRecord) *Source {
	t.Helper()
	s := testSource(t, conns, time.Minute)
	for _, r := range rs {
		if err := s.recordDrive(r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// givenUpAgain gives up the recovery rearm started on socket, and waits
// for it to end: the test's fakes go with the test.
func givenUpAgain(t *testing.T, s *Source, socket string) {
	t.Helper()
	waitFor(t, "the recovery to hear the give-up", func() bool { return s.Recovery(socket, "vm", NudgeGiveUp) })
	key := driveKey(socket, "vm")
	waitFor(t, "the recovery to end", func() bool {
		if s.running.start(key) {
			s.running.end(key)
			return true
		}
		return false
	})
}

func givenUp(t *testing.T, s *Source, id string) bool {
	t.Helper()
	r, ok := s.recordedDrive(id)
	if !ok {
		t.Fatalf("the record of %s is gone", id)
	}
	return r.GivenUp
}

// Of two given-up records of the name, the one whose guest was destroyed
// since (its pod gone) is not weighed: the name is not ambiguous, and the
// held guest's recovery starts again, under its domain's key, its record
// no longer given up; given up again, it is kept for the next recover.
func TestRearmWeighsOnlyTheRecordWhoseGuestIsStillHeld(t *testing.T) {
	held, c1, r1 := givenUpGuest(t, 1)
	gone, c2, r2 := givenUpGuest(t, 2)
	gone.RemoveDomain("vm")
	s := rearmSource(t, map[string]*libvirtx.Conn{r1.Socket: c1, r2.Socket: c2}, r1, r2)
	if !s.rearm("", "vm") {
		t.Fatal("rearm refused the one given-up post-copy whose guest is still held")
	}
	if givenUp(t, s, r1.ID) || !givenUp(t, s, r2.ID) {
		t.Errorf("given up: held %v, gone %v; want the held one's recovery started again only", givenUp(t, s, r1.ID), givenUp(t, s, r2.ID))
	}
	if s.running.start(driveKey(r1.Socket, "vm")) {
		t.Error("the recovery started again without its domain's key")
	}
	if !s.running.start(driveKey(r2.Socket, "vm")) {
		t.Error("the gone guest's domain key was taken")
	}
	s.running.end(driveKey(r2.Socket, "vm"))
	givenUpAgain(t, s, r1.Socket)
	if !givenUp(t, s, r1.ID) {
		t.Error("a recovery given up again lost its given-up record")
	}
	if len(held.Calls(libvirtxtest.ProcDomainLookupByName)) == 0 {
		t.Error("the held guest's libvirt was never asked")
	}
}

// No given-up record whose guest is still held in post-copy: nothing to
// start, whatever else the record's socket holds now.
func TestRearmStartsNothingWhenNoGuestIsHeld(t *testing.T) {
	for _, c := range []struct {
		name string
		now  func(f *libvirtxtest.Server)
	}{
		{"destroyed since", func(f *libvirtxtest.Server) { f.RemoveDomain("vm") }},
		{"another guest of the name", func(f *libvirtxtest.Server) {
			state, reason := heldPaused()
			f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{9}, ID: 2, State: state, Reason: reason})
		}},
		{"running again", func(f *libvirtxtest.Server) {
			f.SetState("vm", int32(libvirtx.StateRunning), int32(libvirt.DomainRunningUnpaused))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, conn, r := givenUpGuest(t, 1)
			c.now(f)
			s := rearmSource(t, map[string]*libvirtx.Conn{r.Socket: conn}, r)
			if s.rearm("", "vm") {
				t.Error("rearm started a recovery of a guest no longer held")
				givenUpAgain(t, s, r.Socket)
				return
			}
			if !givenUp(t, s, r.ID) || !s.running.start(driveKey(r.Socket, "vm")) {
				t.Error("a refused rearm changed the record or took the domain's key")
			}
		})
	}
}

// Two given-up records of the name whose guests are both held (two
// sockets): the name alone is ambiguous, and nothing starts; naming the
// socket starts that one only.
func TestRearmOfTwoHeldGuestsNeedsTheSocketNamed(t *testing.T) {
	_, c1, r1 := givenUpGuest(t, 1)
	_, c2, r2 := givenUpGuest(t, 2)
	s := rearmSource(t, map[string]*libvirtx.Conn{r1.Socket: c1, r2.Socket: c2}, r1, r2)
	if s.rearm("", "vm") {
		t.Error("rearm by name alone chose one of two held guests")
		givenUpAgain(t, s, "")
		return
	}
	if !givenUp(t, s, r1.ID) || !givenUp(t, s, r2.ID) {
		t.Fatal("an ambiguous rearm changed a record")
	}
	if !s.rearm(r2.Socket, "vm") {
		t.Fatal("rearm on a named socket refused its held guest")
	}
	if !givenUp(t, s, r1.ID) || givenUp(t, s, r2.ID) {
		t.Errorf("given up: %v, %v; want only the named socket's started again", givenUp(t, s, r1.ID), givenUp(t, s, r2.ID))
	}
	givenUpAgain(t, s, r2.Socket)
}
