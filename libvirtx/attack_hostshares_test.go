package libvirtx

import (
	"strings"
	"testing"
)

// A peer's guest that reaches past its image to the host's devices, or
// states host threads and CPU weight for itself, was accepted: SCSI
// pass-through with raw I/O (libvirt grants QEMU CAP_SYS_RAWIO), unfiltered
// SG_IO (libvirt sets the host device's unpriv_sgio), persistent
// reservations (a root qemu-pr-helper, or a socket the peer names), a
// hundred thousand I/O threads, CPU shares past every neighbour's, and
// NUMA cells whose sizes wrap to a small sum.
func TestAttackGuestsReachingPastTheirShareAreRefused(t *testing.T) {
	huge := strings.Repeat(`<cell id='0' cpus='0' memory='9007199254740992' unit='KiB'/>`, 2048)
	for name, c := range map[string]struct{ top, devices, want string }{
		"lun rawio":      {"", `<disk type='block' device='lun' rawio='yes'><driver name='qemu' type='raw'/><source dev='/var/lib/libvirt/images/sdz'/><target dev='sda' bus='scsi'/></disk>`, "device='lun'"},
		"sgio":           {"", `<disk type='block' device='disk' sgio='unfiltered'><source dev='/var/lib/libvirt/images/sdz'/><target dev='vdc'/></disk>`, "sgio"},
		"managed pr":     {"", `<disk type='block' device='disk'><source dev='/var/lib/libvirt/images/sdz'><reservations managed='yes'/></source><target dev='vdc'/></disk>`, "reservations"},
		"pr socket":      {"", `<disk type='block' device='disk'><source dev='/var/lib/libvirt/images/sdz'><reservations managed='no'><source type='unix' path='/var/lib/libvirt/images/pr.sock' mode='client'/></reservations></source><target dev='vdc'/></disk>`, "reservations"},
		"iothreads":      {"<iothreads>100000</iothreads>", "", "I/O threads"},
		"shares":         {"<vcpu>2</vcpu><cputune><shares>262144</shares></cputune>", "", "shares"},
		"wrapping cells": {"<vcpu>64</vcpu><cpu><numa>" + huge + "<cell id='1' cpus='1' memory='1' unit='GiB'/></numa></cpu>", "", "NUMA"},
		"more cells":     {"<vcpu>64</vcpu><cpu><numa>" + strings.Repeat(`<cell id='0' cpus='0' memory='1' unit='MiB'/>`, 65) + "</numa></cpu>", "", "NUMA cells"},
	} {
		err := CheckIncomingXML(guestXML("vm", c.top, c.devices), "vm", policyForTest)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want it refused naming %s", name, err, c.want)
		}
	}
	for name, top := range map[string]string{
		"a vCPU's shares": "<vcpu>4</vcpu><cputune><shares>4096</shares><period>100000</period><quota>50000</quota></cputune>",
		"two iothreads":   "<iothreads>2</iothreads>",
	} {
		if err := CheckIncomingXML(guestXML("vm", top, ""), "vm", policyForTest); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The source's check warns of what no Ferry target takes, in the words a
// target would refuse it with, before any migration is asked for.
func TestRefusedFeaturesAreWhatATargetRefuses(t *testing.T) {
	x := guestXML("vm", "<memoryBacking><hugepages/></memoryBacking><cputune><vcpupin vcpu='0' cpuset='1'/></cputune>", "")
	got := RefusedFeatures(x)
	if len(got) != 2 || !strings.Contains(got[0], "<hugepages>") || !strings.Contains(got[1], "<vcpupin>") {
		t.Fatalf("refused features %q; want <hugepages> and <vcpupin>", got)
	}
	if err := CheckIncomingXML(x, "vm", policyForTest); err == nil || !strings.Contains(err.Error(), got[0]) {
		t.Errorf("a target refuses it as %v, not as the check warned: %q", err, got[0])
	}
	if got := RefusedFeatures(guestXML("vm", "", "")); len(got) != 0 {
		t.Errorf("an ordinary guest: %q", got)
	}
}
