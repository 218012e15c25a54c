package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// runningDomains are n running domains, as a listing shows them.
func runningDomains(n int) []libvirtxtest.Domain {
	doms := make([]libvirtxtest.Domain, n)
	for i := range doms {
		doms[i] = libvirtxtest.Domain{Name: fmt.Sprintf("ns_vm%d", i), UUID: libvirt.UUID{15: byte(i)}, ID: int32(i + 1), State: int32(StateRunning)}
	}
	return doms
}

// A pod can serve a libvirt of its own where the launcher glob looks; what
// it lists is tracked only within what a launcher runs.
func TestALauncherSocketListsOnlyWhatALauncherRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "virtqemud-sock")
	f := libvirtxtest.New(t, path)
	f.SetDomains(runningDomains(MaxLauncherDomains)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	matched, err := DialMatched(ctx, path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer matched.Close()
	if doms, err := matched.Domains(ctx); err != nil || len(doms) != MaxLauncherDomains {
		t.Fatalf("a launcher listing %d domains: %d, %v", MaxLauncherDomains, len(doms), err)
	}
	f.SetDomains(runningDomains(MaxLauncherDomains + 1)...)
	if doms, err := matched.Domains(ctx); !errors.Is(err, ErrNotALauncher) || doms != nil {
		t.Fatalf("a launcher socket listing %d domains: %d of them, %v; want ErrNotALauncher", MaxLauncherDomains+1, len(doms), err)
	}
	long := runningDomains(1)
	long[0].Name = strings.Repeat("n", MaxLauncherName+1)
	f.SetDomains(long...)
	if doms, err := matched.Domains(ctx); !errors.Is(err, ErrNotALauncher) || doms != nil {
		t.Fatalf("a launcher socket naming a domain in %d bytes: %d, %v; want ErrNotALauncher", MaxLauncherName+1, len(doms), err)
	}
	f.SetDomains(runningDomains(MaxLauncherDomains + 1)...)
	// A socket named in ferryd's flags is a host's libvirt: no bound.
	named, err := Dial(ctx, path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if doms, err := named.Domains(ctx); err != nil || len(doms) != MaxLauncherDomains+1 {
		t.Fatalf("a named socket listing %d domains: %d, %v", MaxLauncherDomains+1, len(doms), err)
	}
}

// The pool refuses such a socket before anything of it is served, and its
// status says why; a launcher beside it is served.
func TestThePoolHoldsOffASocketThatIsNoLauncher(t *testing.T) {
	dir := t.TempDir()
	fake := libvirtxtest.New(t, filepath.Join(dir, "fake.sock"))
	fake.SetDomains(runningDomains(MaxLauncherDomains + 1)...)
	launcher := libvirtxtest.New(t, filepath.Join(dir, "launcher.sock"))
	launcher.SetDomains(runningDomains(1)...)
	p, h, _ := runPool(t, PoolConfig{Glob: filepath.Join(dir, "*.sock"), RescanEvery: 20 * time.Millisecond, CallTimeout: time.Second})
	h.waitServed(t, launcher.Path())
	deadline := time.Now().Add(5 * time.Second)
	for {
		var st SocketStatus
		for _, s := range p.Status() {
			if s.Socket == fake.Path() {
				st = s
			}
		}
		if !st.Up && strings.Contains(st.LastError, "no KubeVirt launcher runs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v: want the fake socket held off", p.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case s := <-h.served:
		if s == fake.Path() {
			t.Fatal("the socket that is no launcher was served")
		}
	default:
	}
}
