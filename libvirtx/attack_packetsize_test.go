package libvirtx

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// hugeListing is a valid answer to the domain listing (the state group of
// every active domain) that fills libvirt's largest packet: as many
// domains as libvirt lists, each named in 1968 bytes, 2 KiB a record.
func hugeListing() (body []byte, domains int) {
	const records = xdrDomainListMax - 1
	name := strings.Repeat("n", 1972)
	x := new(libvirtxtest.XDR).U32(records)
	for i := range records {
		x.Domain(name, libvirt.UUID{0: byte(i >> 8), 1: byte(i)}, int32(i+1))
		x.U32(2).Param("state.state", int32(StateRunning)).Param("state.reason", int32(1))
	}
	return x.Bytes(), records
}

// A pod's libvirt answered every listing with a valid packet of 32 MiB,
// libvirt's limit, which ferryd buffered whole, copied into go-libvirt
// and decoded before it could count the domains: over 100 MiB allocated
// per listing. A launcher's libvirt runs one VM; a socket the glob matched
// is refused any packet over maxLauncherPacket as its length comes in,
// while a named socket, the node's libvirt, still gets libvirt's limit.
func TestAttackALaunchersHugeListingIsRefusedCheaply(t *testing.T) {
	body, domains := hugeListing()
	if len(body)+28 > maxPacket || len(body)+28 < maxPacket-(64<<10) {
		t.Fatalf("listing of %d bytes: want it just within libvirt's %d", len(body)+28, maxPacket)
	}
	path := filepath.Join(t.TempDir(), "virtqemud-sock")
	f := libvirtxtest.New(t, path)
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcConnectGetAllDomainStats {
			return body, nil, true
		}
		return nil, nil, false
	})
	const attempts = 3
	var errs [attempts]error
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range errs {
		errs[i] = listLauncher(path)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / attempts
	t.Logf("%d KiB allocated per listing refused", per>>10)
	if per > 2<<20 {
		t.Fatalf("%d MiB allocated per listing of %d MiB from a launcher's socket (%v)", per>>20, (len(body)+28)>>20, errs[0])
	}
	for _, err := range errs {
		if !errors.Is(err, errLauncherPacket) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprint(len(body)+28)) {
			t.Fatalf("a launcher's listing of %d bytes: %v; want it refused, naming the socket and the size", len(body)+28, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, err := Dial(ctx, path, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if doms, err := node.Domains(ctx); err != nil || len(doms) != domains {
		t.Fatalf("the node's libvirt listing %d domains in %d bytes: %d, %v", domains, len(body)+28, len(doms), err)
	}
}

// listLauncher lists the domains of the launcher socket at path on a
// connection of its own.
func listLauncher(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialMatched(ctx, path, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Domains(ctx)
	return err
}
