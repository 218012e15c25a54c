package libvirtx

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// What another guest of the node owns may not be named by an incoming
// one in any role; what it shares read-only (a backing image, a kernel)
// may be shared, not taken as the incoming guest's own.
func TestAnIncomingGuestTakesNoOtherGuestsFiles(t *testing.T) {
	dir := t.TempDir()
	disk, base := filepath.Join(dir, "other.qcow2"), filepath.Join(dir, "base.qcow2")
	for _, p := range []string{disk, base} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Each guest's own root disk besides.
	other := strings.Replace(guestXML("other", "", `<disk type='file' device='disk'><source file='`+disk+`'/><backingStore type='file'><format type='qcow2'/><source file='`+base+`'/></backingStore><target dev='vdb'/></disk>`), "images/vm.qcow2", "images/other-root.qcow2", 1)
	of, err := FilesOf(other)
	if err != nil {
		t.Fatal(err)
	}
	others := map[string]GuestFiles{"other": of}
	mine := filepath.Join(dir, "mine.qcow2")
	for name, c := range map[string]struct {
		devices string
		taken   string
	}{
		"its disk read-only":        {`<disk type='file' device='disk'><source file='` + disk + `'/><readonly/><target dev='vdc'/></disk>`, disk},
		"its disk as shareable":     {`<disk type='file' device='disk'><source file='` + disk + `'/><shareable/><target dev='vdc'/></disk>`, disk},
		"its disk as my backing":    {`<disk type='file' device='disk'><source file='` + mine + `'/><backingStore type='file'><format type='qcow2'/><source file='` + disk + `'/></backingStore><target dev='vdc'/></disk>`, disk},
		"its base as my disk":       {`<disk type='file' device='disk'><source file='` + base + `'/><target dev='vdc'/></disk>`, base},
		"its disk as my serial log": {`<serial type='pty'><log file='` + disk + `'/><target port='1'/></serial>`, disk},
		"a base we share":           {`<disk type='file' device='disk'><source file='` + mine + `'/><backingStore type='file'><format type='qcow2'/><source file='` + base + `'/></backingStore><target dev='vdc'/></disk>`, ""},
	} {
		f, err := FilesOf(guestXML("vm", "", c.devices))
		if err != nil {
			t.Fatal(err)
		}
		o, taken := TakenFrom(f, others)
		if c.taken == "" && taken {
			t.Errorf("%s: refused as taking %s from %s", name, o.File, o.Name)
		}
		if c.taken != "" && (!taken || o.File != c.taken || o.Name != "other") {
			t.Errorf("%s: %+v %v, want %s of other", name, o, taken, c.taken)
		}
	}
	if f, _ := FilesOf(other); strings.Join(f.Own, ",") != "/var/lib/libvirt/images/other-root.qcow2,"+disk {
		t.Errorf("other's own files: %v", f.Own)
	}
}

// What guests share on purpose is no taking: an install ISO both read, a
// cluster's quorum disk both mark shareable. Writing into either, or
// taking a shareable disk as one's own, still is; and a guest that is
// only defined keeps its disks: a template's image cannot tell itself
// from a victim's, so it backs no incoming clone.
func TestWhatGuestsShareOnPurposeIsNotTaken(t *testing.T) {
	iso, quorum, golden := "/var/lib/libvirt/images/virtio-win.iso", "/var/lib/libvirt/images/quorum.raw", "/var/lib/libvirt/images/golden.qcow2"
	devs := `<disk type='file' device='cdrom'><source file='` + iso + `'/><readonly/><target dev='sda' bus='sata'/></disk>
	  <disk type='file' device='disk'><source file='` + quorum + `'/><shareable/><target dev='vdb'/></disk>`
	member, err := FilesOf(strings.Replace(guestXML("node1", "", devs), "images/vm.qcow2", "images/node1.qcow2", 1))
	if err != nil {
		t.Fatal(err)
	}
	template, err := FilesOf(strings.Replace(guestXML("template", "", ""), "images/vm.qcow2", "images/golden.qcow2", 1))
	if err != nil {
		t.Fatal(err)
	}
	others := map[string]GuestFiles{"node1": member, "template": template}
	for name, c := range map[string]struct {
		devices string
		taken   string
	}{
		"the same ISO, read-only":         {`<disk type='file' device='cdrom'><source file='` + iso + `'/><readonly/><target dev='sda' bus='sata'/></disk>`, ""},
		"the quorum disk, shareable":      {`<disk type='file' device='disk'><source file='` + quorum + `'/><shareable/><target dev='vdb'/></disk>`, ""},
		"the template's image as backing": {`<disk type='file' device='disk'><source file='/var/lib/libvirt/images/clone.qcow2'/><backingStore type='file'><format type='qcow2'/><source file='` + golden + `'/></backingStore><target dev='vdc'/></disk>`, golden},
		"the ISO, written":                {`<disk type='file' device='disk'><source file='` + iso + `'/><target dev='vdc'/></disk>`, iso},
		"the quorum disk, as its own":     {`<disk type='file' device='disk'><source file='` + quorum + `'/><target dev='vdc'/></disk>`, quorum},
		"the template's image, written":   {`<disk type='file' device='disk'><source file='` + golden + `'/><target dev='vdc'/></disk>`, golden},
	} {
		f, err := FilesOf(strings.Replace(guestXML("vm", "", c.devices), "images/vm.qcow2", "images/vm-root.qcow2", 1))
		if err != nil {
			t.Fatal(err)
		}
		o, taken := TakenFrom(f, others)
		if taken != (c.taken != "") || taken && o.File != c.taken {
			t.Errorf("%s: taken %v (%+v), want %q", name, taken, o, c.taken)
		}
	}
}

// What QEMU reads besides disks (a device tree, ACPI tables) and an
// image's external data file are files of the guest too.
func TestFilesOfNamesDeviceTreesTablesAndDataFiles(t *testing.T) {
	x := strings.Replace(guestXML("vm", "", `<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='/var/lib/libvirt/images/d.qcow2'><dataStore type='file'><format type='raw'/><source file='/var/lib/libvirt/images/d.raw'/></dataStore></source><backingStore/><target dev='vdb'/></disk>`),
		"</kernel>", "</kernel><dtb>/var/lib/libvirt/images/vm.dtb</dtb><acpi><table type='slic'>/var/lib/libvirt/images/slic.dat</table></acpi>", 1)
	f, err := FilesOf(x)
	if err != nil {
		t.Fatal(err)
	}
	own, shared := strings.Join(f.Own, " "), strings.Join(f.Shared, " ")
	for _, want := range []string{"d.raw", "d.qcow2"} {
		if !strings.Contains(own, want) {
			t.Errorf("own files %q lack %s", own, want)
		}
	}
	for _, want := range []string{"vm.dtb", "slic.dat"} {
		if !strings.Contains(shared, want) {
			t.Errorf("shared files %q lack %s", shared, want)
		}
	}
}

// A guest coming here in a migration, known to the caller, is not asked
// of libvirt, which answers no call for its XML until the migration is
// over (libvirt 11.3): its files come from what the caller knows of it,
// while libvirt shows it coming. Once libvirt shows it arrived (running),
// or for any other domain, libvirt is asked.
func TestTheFilesOfAGuestComingHereAreNotAskedOfLibvirt(t *testing.T) {
	s := libvirtxtest.New(t, "")
	coming := libvirtxtest.Domain{Name: "coming", UUID: libvirt.UUID{1}, ID: 1, State: int32(StatePaused), Reason: PausedMigration}
	s.SetDomains(coming, libvirtxtest.Domain{Name: "other", UUID: libvirt.UUID{2}, ID: 2, State: int32(StateRunning)})
	var comingDefined atomic.Bool
	s.Answer(func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool) {
		switch proc {
		case procConnectListAllDomains:
			if binary.BigEndian.Uint32(args[len(args)-4:])&uint32(libvirt.ConnectListDomainsPersistent) != 0 {
				if comingDefined.Load() {
					return new(libvirtxtest.XDR).U32(1).Domain("coming", libvirt.UUID{1}, 1).U32(1).Bytes(), nil, true
				}
				return new(libvirtxtest.XDR).U32(0).U32(0).Bytes(), nil, true
			}
			return new(libvirtxtest.XDR).U32(2).Domain("coming", libvirt.UUID{1}, 1).Domain("other", libvirt.UUID{2}, 2).U32(2).Bytes(), nil, true
		case libvirtxtest.ProcDomainGetXMLDesc:
			return new(libvirtxtest.XDR).String(guestXML("other", "", "")).Bytes(), nil, true
		}
		return nil, nil, false
	})
	c, err := Dial(context.Background(), s.Path(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	comingFiles := GuestFiles{Own: []string{"/var/lib/libvirt/images/coming.qcow2"}}
	var finishing atomic.Bool
	known := func(d libvirt.Domain) (ComingGuest, bool) {
		return ComingGuest{Files: comingFiles, Finishing: finishing.Load()}, d.Name == "coming" && d.UUID == libvirt.UUID{1}
	}
	askedOfComing := func() int {
		n := 0
		for _, args := range s.Calls(libvirtxtest.ProcDomainGetXMLDesc) {
			if bytes.Contains(args, []byte("coming")) {
				n++
			}
		}
		return n
	}
	got, err := c.OtherGuestsFiles(context.Background(), UUIDString(libvirt.UUID{9}), known)
	if err != nil {
		t.Fatal(err)
	}
	if askedOfComing() != 0 {
		t.Error("libvirt was asked for the XML of the guest coming here")
	}
	if len(s.Calls(libvirtxtest.ProcDomainGetXMLDesc)) == 0 {
		t.Error("libvirt was not asked for the other guest's XML")
	}
	if !slices.Equal(got["coming"].Own, comingFiles.Own) || len(got["other"].Own) == 0 {
		t.Errorf("files %+v, want the coming guest's as known and the other's from libvirt", got)
	}
	// Coming into a definition this node holds: that one is libvirt's to
	// name.
	comingDefined.Store(true)
	if _, err := c.OtherGuestsFiles(context.Background(), UUIDString(libvirt.UUID{9}), known); err != nil {
		t.Fatal(err)
	}
	if askedOfComing() == 0 {
		t.Error("a guest coming into a definition held here was not asked of libvirt")
	}
	// Running while the caller's Finish of it runs: still the incoming
	// job's, whose XML libvirt holds back until that Finish returns.
	comingDefined.Store(false)
	coming.State, coming.Reason = int32(StateRunning), 0
	s.SetDomains(coming)
	finishing.Store(true)
	before := askedOfComing()
	if _, err := c.OtherGuestsFiles(context.Background(), UUIDString(libvirt.UUID{9}), known); err != nil {
		t.Fatal(err)
	}
	if askedOfComing() != before {
		t.Error("a guest running while its Finish runs here was asked of libvirt")
	}
	// Arrived: libvirt's word again.
	finishing.Store(false)
	if _, err := c.OtherGuestsFiles(context.Background(), UUIDString(libvirt.UUID{9}), known); err != nil {
		t.Fatal(err)
	}
	if askedOfComing() == before {
		t.Error("a guest libvirt shows arrived was not asked of libvirt")
	}
}

// procConnectListAllDomains is libvirt's REMOTE_PROC_CONNECT_LIST_ALL_DOMAINS.
const procConnectListAllDomains = 273
