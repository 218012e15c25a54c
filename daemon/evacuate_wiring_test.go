package daemon

import (
	"context"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// sizedBy is a domain on a fake libvirt that answers its size calls with
// answer, on a connection whose calls give up after 2 s.
func sizedBy(t *testing.T, answer func() ([]byte, *libvirt.Error, bool)) liveDomain {
	t.Helper()
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", UUID: libvirt.UUID{3}, ID: 1, State: int32(libvirtx.StateRunning), Reason: 1})
	f.Answer(func(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
		if proc != procDomainGetBlockInfo {
			return nil, nil, false
		}
		return answer()
	})
	c, err := libvirtx.Dial(context.Background(), f.Path(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return liveDomain{conn: c, dom: libvirt.Domain{Name: "vm", UUID: libvirt.UUID{3}, ID: 1}, socket: f.Path(), name: "vm"}
}

// A disk libvirt says has no size is unknown; only a call libvirt left
// unanswered is an error, reported as late.
func TestADiskLibvirtRefusesToSizeIsUnknownNotLate(t *testing.T) {
	refused := sizedBy(t, func() ([]byte, *libvirt.Error, bool) {
		return nil, &libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "no size for a network disk"}, true
	})
	if size, known, err := refused.DiskSize(context.Background(), "vda"); err != nil || known || size != 0 {
		t.Errorf("refused: size %d, known %v, err %v; want unknown and no error", size, known, err)
	}
	if size, known, err := sizedBy(t, sized).DiskSize(context.Background(), "vda"); err != nil || !known || size != 10<<30 {
		t.Errorf("answered: size %d, known %v, err %v; want 10 GiB", size, known, err)
	}
	if _, known, err := sizedBy(t, neverSized(t)).DiskSize(context.Background(), "vda"); err == nil || known {
		t.Errorf("unanswered: known %v, err %v; want an error", known, err)
	}
}
