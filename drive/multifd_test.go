package drive

import (
	"context"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// Multifd with post-copy is asked of the QEMU that would run it: 10.0
// takes them only apart, and says why; 10.1 takes both; a migration
// without both asks nothing.
func TestMultifdWithPostCopyIsTheQEMUsToSay(t *testing.T) {
	f := libvirtxtest.New(t, "")
	ctx := context.Background()
	c, err := libvirtx.Dial(ctx, f.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if why, err := multifdWithPostCopy(ctx, c, true, true); err != nil || !strings.Contains(why, "QEMU 10.0.2 here takes multifd") {
		t.Fatalf("QEMU 10.0: %q, %v; want it refused by version", why, err)
	}
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc == libvirtxtest.ProcConnectGetVersion {
			return new(libvirtxtest.XDR).U64(10_001_000).Bytes(), nil, true
		}
		return nil, nil, false
	})
	if why, err := multifdWithPostCopy(ctx, c, true, true); err != nil || why != "" {
		t.Fatalf("QEMU 10.1: %q, %v; want it taken", why, err)
	}
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrInternalError), Message: "asked"}, true
	})
	for _, c2 := range [][2]bool{{true, false}, {false, true}} {
		if why, err := multifdWithPostCopy(ctx, c, c2[0], c2[1]); err != nil || why != "" {
			t.Fatalf("multifd %v, post-copy %v asked QEMU: %q, %v", c2[0], c2[1], why, err)
		}
	}
}
