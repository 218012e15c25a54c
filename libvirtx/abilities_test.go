package libvirtx

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// asOld has the fake answer as libvirt 8.0 does: its version, and no
// virDomainAbortJobFlags (libvirt 8.5).
func asOld(f *libvirtxtest.Server) {
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcConnectGetLibVersion:
			return new(libvirtxtest.XDR).U64(8_000_000).Bytes(), nil, true
		case libvirtxtest.ProcDomainAbortJobFlags:
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrNoSupport), Message: "unknown procedure: 442"}, true
		}
		return nil, nil, false
	})
}

// A libvirt older than Ferry's minimum is refused, its status naming its
// socket, its version and what a probe found it lacks; the node's other
// libvirt is served, its versions shown.
func TestAnOldLibvirtIsRefusedByNameAndTheOthersServed(t *testing.T) {
	dir := t.TempDir()
	p, h, _ := runPool(t, fastRetries(dir))
	old := libvirtxtest.New(t, filepath.Join(dir, "old.sock"))
	asOld(old)
	cur := libvirtxtest.New(t, filepath.Join(dir, "new.sock"))
	h.waitServed(t, cur.Path())
	var oldStatus, curStatus SocketStatus
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range p.Status() {
			switch s.Socket {
			case old.Path():
				oldStatus = s
			case cur.Path():
				curStatus = s
			}
		}
		if oldStatus.LastError != "" && curStatus.QEMUVersion != "" {
			break
		}
	}
	if oldStatus.Up || !strings.Contains(oldStatus.LastError, "libvirt 8.0.0 at "+old.Path()+" is older than 9.0.0") ||
		!strings.Contains(oldStatus.LastError, "virDomainAbortJobFlags") {
		t.Fatalf("the old libvirt's status is %+v; want it down, naming its socket, version and what it lacks", oldStatus)
	}
	if !curStatus.Up || curStatus.LibVersion != "11.3.0" || curStatus.QEMUVersion != "10.0.2" {
		t.Fatalf("the current libvirt's status is %+v; want it up, libvirt 11.3.0 and QEMU 10.0.2", curStatus)
	}
	select {
	case s := <-h.served:
		t.Fatalf("%s was served", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// The minimum is by version, and what is missing is found by asking: a
// libvirt at the minimum is served whatever it lacks; below it the
// refusal names the lack.
func TestAbilitiesNameWhatAProbeFindsMissing(t *testing.T) {
	a := Abilities{Libvirt: MinLibvirt, Lacks: []string{"x"}}
	if err := a.Refusal("/s"); err != nil {
		t.Fatalf("a libvirt at the minimum is refused: %v", err)
	}
	a.Libvirt = MinLibvirt - 1
	if err := a.Refusal("/s"); !errors.Is(err, ErrTooOld) || !strings.Contains(err.Error(), "it lacks x") {
		t.Fatalf("below the minimum: %v", err)
	}
}

// A libvirt that words "unknown procedure" in its own language still lacks
// the call, and an old one is refused by its version whatever a probe
// answers.
func TestAProbeInAnotherLanguageNamesTheLack(t *testing.T) {
	dir := t.TempDir()
	p, _, _ := runPool(t, fastRetries(dir))
	old := libvirtxtest.New(t, filepath.Join(dir, "old.sock"))
	old.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case libvirtxtest.ProcConnectGetLibVersion:
			return new(libvirtxtest.XDR).U64(8_000_000).Bytes(), nil, true
		case libvirtxtest.ProcDomainAbortJobFlags:
			return nil, &libvirt.Error{Code: uint32(libvirt.ErrNoSupport), Message: "procédure inconnue : 442"}, true
		}
		return nil, nil, false
	})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range p.Status() {
			if s.Socket == old.Path() && strings.Contains(s.LastError, "older than 9.0.0") {
				if !strings.Contains(s.LastError, "virDomainAbortJobFlags") {
					t.Fatalf("the lack is not named: %s", s.LastError)
				}
				return
			}
		}
	}
	t.Fatalf("the old libvirt was never refused by version: %+v", p.Status())
}
