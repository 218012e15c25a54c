package drive

import (
	"errors"
	"strings"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

func domainXML(uuid, memoryKiB, disk string) string {
	return `<domain type='qemu'><name>vm</name><uuid>` + uuid + `</uuid><memory unit='KiB'>` + memoryKiB + `</memory>
<os><type arch='x86_64' machine='pc'>hvm</type><kernel>/var/lib/libvirt/images/vmlinuz</kernel></os>
<devices><disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='` + disk + `'/><target dev='vda' bus='virtio'/></disk></devices></domain>`
}

const (
	guestUUID = "7c3a2c5e-2b36-4a7b-9d8e-0a4c1b2e3f40"
	okDisk    = "/var/lib/libvirt/images/vm.img"
)

// The persistent definition a source sends is checked as the live XML is,
// must be the same guest, and is what the target keeps: pending config
// changes (here, memory) and not the live XML.
func TestTheTargetKeepsTheCheckedPersistentDefinition(t *testing.T) {
	in := &Target{policy: libvirtx.IncomingPolicy{AllowedPaths: []string{"/var/lib/libvirt/images"}, MaxMemoryKiB: 1 << 30, MaxVCPUs: 8}}
	live := domainXML(guestUUID, "262144", okDisk)
	persist := uint32(libvirt.MigrateLive | libvirt.MigratePersistDest)

	_, config, err := in.check(peer.IncomingMigration{Domain: "vm", Flags: persist, Config: domainXML(guestUUID, "524288", okDisk)}, live)
	if err != nil || !strings.Contains(config, "524288") {
		t.Fatalf("kept %q, %v; want the definition with its pending memory change", config, err)
	}
	if _, config, err := in.check(peer.IncomingMigration{Domain: "vm", Flags: persist}, live); err != nil || !strings.Contains(config, "262144") {
		t.Errorf("a source that sends no definition: kept %q, %v; want the checked live XML", config, err)
	}
	if _, config, err := in.check(peer.IncomingMigration{Domain: "vm", Flags: uint32(libvirt.MigrateLive)}, live); err != nil || config != "" {
		t.Errorf("a transient guest: kept %q, %v; want nothing", config, err)
	}
	for name, m := range map[string]peer.IncomingMigration{
		"another guest":        {Domain: "vm", Flags: persist, Config: domainXML("00000000-2b36-4a7b-9d8e-0a4c1b2e3f40", "262144", okDisk)},
		"a path not allowed":   {Domain: "vm", Flags: persist, Config: domainXML(guestUUID, "262144", "/etc/shadow")},
		"too much memory":      {Domain: "vm", Flags: persist, Config: domainXML(guestUUID, "4294967296", okDisk)},
		"kept without persist": {Domain: "vm", Flags: uint32(libvirt.MigrateLive), Config: domainXML(guestUUID, "262144", okDisk)},
	} {
		var r *peer.Refusal
		if _, _, err := in.check(m, live); !errors.As(err, &r) || r.Reason != "invalid_domain_xml" {
			t.Errorf("%s: %v, want it refused as invalid_domain_xml", name, err)
		}
	}
}

// Only the shut-off reasons libvirt gives an incoming guest it stopped
// before handing it over say it never ran.
func TestOnlyAnIncomingStopSaysTheGuestNeverRan(t *testing.T) {
	for reason, never := range map[int32]bool{
		libvirtx.ShutoffFailed: true, libvirtx.ShutoffDestroyed: true, libvirtx.ShutoffDaemon: true,
		1 /* shutdown */ : false, 3 /* crashed */ : false, libvirtx.ShutoffMigrated: false, 5 /* saved */ : false,
	} {
		if got := libvirtx.StoppedIncoming(reason); got != never {
			t.Errorf("shut off, %s: StoppedIncoming %v, want %v", libvirtx.ReasonName(libvirtx.StateShutoff, reason), got, never)
		}
	}
}
