package libvirtx

import (
	"strings"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

func TestResumesPostCopyExceptOnTheLibvirtsThatCrash(t *testing.T) {
	for v, want := range map[uint64]bool{
		0:          false, // never asked: not assumed
		9_000_000:  true,
		11_001_000: true,
		11_002_000: false,
		11_003_000: false,
		11_003_009: false,
		11_004_000: true,
		12_009_000: true,
	} {
		if got := ResumesPostCopy(v); got != want {
			t.Errorf("ResumesPostCopy(%s) = %v, want %v", VersionString(v), got, want)
		}
	}
}

func TestResumeDomainXMLNamesTheGuestAlone(t *testing.T) {
	dom := libvirt.Domain{Name: "a<b&c", UUID: libvirt.UUID{1, 2, 3}}
	x, err := ResumeDomainXML(dom, "kvm")
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatalf("%v:\n%s", err, x)
	}
	if d.Name != dom.Name || d.UUID != UUIDString(dom.UUID) || d.Type != "kvm" || d.Devices != nil {
		t.Fatalf("the resume's XML names %q %q, with devices %v:\n%s", d.Name, d.UUID, d.Devices, x)
	}
}

func TestVirtTypeIsReadOffQEMUsCommandLine(t *testing.T) {
	for cmdline, want := range map[string]string{
		"qemu-system-x86_64 -name guest=g -machine pc-q35-10.0,usb=off -accel kvm -cpu host": "kvm",
		"qemu-system-x86_64 -machine pc-i440fx-7.2,usb=off -accel tcg":                       "qemu",
		"qemu-system-x86_64 -machine pc-i440fx-5.2,accel=kvm,usb=off":                        "kvm",
		"qemu-system-x86_64 -machine pc,accel=kvm:tcg":                                       "kvm",
		"qemu-kvm -enable-kvm -m 1024":                                                       "kvm",
		"qemu-system-x86_64 -m 1024":                                                         "qemu",
		"qemu-system-x86_64 -accel":                                                          "qemu",
	} {
		if got := virtTypeOf(strings.Fields(cmdline)); got != want {
			t.Errorf("%s: %s, want %s", cmdline, got, want)
		}
	}
}
