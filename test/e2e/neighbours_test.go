//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
	"github.com/ferry-vm/ferry/test/testbed"
)

// crowdScript, run by an unprivileged user, keeps twice as many idle
// connections to a proxy as one address may have in their handshake,
// closing and opening them all again twice a second.
const crowdScript = `while :; do
  fds=()
  for i in $(seq %d); do exec {fd}<>/dev/tcp/%s/%d 2>/dev/null && fds+=($fd); done
  sleep 0.5
  for fd in "${fds[@]}"; do exec {fd}>&-; done
done`

// An unprivileged user on node a, whose connections come from node a's
// own address, crowds node b's proxy with idle connections the whole time
// node a's ferryd drives a migration to b: the prepare, the stream and the
// finish all get through, and the guest ends whole on b alone.
func TestALocalUserCrowdingThePeersProxyHoldsNoMigration(t *testing.T) {
	const name = "crowded"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := bed.Node("b")
	before := metricSum("b", "ferry_proxy_rejected_total", `reason="too_many_opening_connections"`)
	script := fmt.Sprintf(crowdScript, 2*proxy.MaxOpeningPerAddr, b.IP, testbed.ProxyPort)
	crowd := bed.Exec(ctx, "a", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script)
	if err := crowd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { crowd.Process.Kill(); crowd.Wait() }()
	waitFor(t, "the local user's connections to crowd b's proxy", 20*time.Second, func() bool {
		return metricSum("b", "ferry_proxy_rejected_total", `reason="too_many_opening_connections"`) > before
	})

	if err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"}); err != nil {
		t.Fatalf("a migration driven while a local user crowds the peer's proxy: %v", err)
	}
	waitJob(t, "a", name, "Completed", 15*time.Second, completed)
	onlyOn(t, name, "b", "a")
	closed := metricSum("b", "ferry_proxy_rejected_total", `reason="too_many_opening_connections"`) - before
	t.Logf("b's proxy closed %v of the local user's connections for room meanwhile", closed)
	if crowd.ProcessState != nil {
		t.Fatalf("the local user's script ended early: %v", crowd.ProcessState)
	}
}

// A peer with a valid certificate asks node b, in a dry run, for a guest
// whose disk, read-only or shareable, is another guest's image on b (a
// guest b holds defined, not running): a dry run's Prepare starts QEMU,
// which would read it. Both are refused naming the image and its guest.
func TestADryRunNamingAnotherGuestsImageIsRefusedByName(t *testing.T) {
	const image = "/var/lib/libvirt/images/owner.qcow2"
	l, err := bed.Libvirt("b")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	owner, err := l.DomainDefineXML(`<domain type='qemu'><name>owner</name><uuid>6f1f6c1e-5b7e-4d53-9a43-3e0b1c2d4f50</uuid><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='` + image + `'/><target dev='vda' bus='virtio'/></disk></devices></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	defer l.DomainUndefine(owner)
	hostile := func(devices string) string {
		return `<domain type='qemu'><name>taker</name><uuid>0b6c2b7a-9d1e-4c3f-8a5b-7e2d1f0c9a31</uuid><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>` + devices + `</devices></domain>`
	}
	for name, devices := range map[string]string{
		"its image as a read-only disk": `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='` + image + `'/><readonly/><target dev='vda' bus='virtio'/></disk>`,
		"its image as a shareable disk": `<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='` + image + `'/><shareable/><target dev='vda' bus='virtio'/></disk>`,
	} {
		t.Run(name, func(t *testing.T) {
			resp := prepareAsNodeA(t, peer.ControlRequest{Op: peer.OpPrepare, Migration: "taker", Domain: "taker", XML: hostile(devices), Flags: 1, DryRun: true})
			if resp.Reason != "invalid_domain_xml" || !strings.Contains(resp.Error, image) || !strings.Contains(resp.Error, "domain owner") {
				t.Errorf("dry run answered %+v, want invalid_domain_xml naming %s of domain owner", resp, image)
			}
			if _, err := l.DomainLookupByName("taker"); err == nil {
				t.Error("node b's libvirt knows the taker after the refusal")
			}
		})
	}
}

// A guest smaller than node b's memory but larger than what b has
// available now was admitted (Prepare starts its QEMU whatever is free):
// a dry run of it is refused for want of memory, naming both.
func TestAGuestLargerThanTheAvailableMemoryIsRefused(t *testing.T) {
	total, avail := meminfoMiB(t, "MemTotal"), meminfoMiB(t, "MemAvailable")
	size := (total + avail) / 2
	x := fmt.Sprintf(`<domain type='qemu'><name>large</name><uuid>2d6e8f10-3b1c-4d7a-9e5f-6a7b8c9d0e1f</uuid><memory unit='MiB'>%d</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os><devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>`, size)
	resp := prepareAsNodeA(t, peer.ControlRequest{Op: peer.OpPrepare, Migration: "large", Domain: "large", XML: x, Flags: 1, DryRun: true})
	if resp.Reason != "insufficient_memory" || !strings.Contains(resp.Error, "available") {
		t.Fatalf("a dry run of a %d MiB guest on a node with %d of %d MiB available answered %+v", size, avail, total, resp)
	}
	t.Logf("refused: %s", resp.Error)
}

// meminfoMiB is a /proc/meminfo field of this machine (the bed's nodes
// share its memory), in MiB.
func meminfoMiB(t *testing.T, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			var kib uint64
			fmt.Sscan(rest, &kib)
			return kib >> 10
		}
	}
	t.Fatalf("no %s in /proc/meminfo", field)
	return 0
}

// Node b holds a guest defined and shut off; a migration in of the same
// name and UUID would have libvirt's Prepare take that definition over
// and its Finish replace it with the peer's: a peer knowing the name and
// UUID would run its own memory on the guest's disks. Refused by default,
// naming the guest and the way out; b's definition is untouched and the
// guest runs on a alone.
func TestAMigrationInOverAShutOffDefinitionIsRefused(t *testing.T) {
	const name = "defhere"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 128, Persistent: true})
	definedOnB(t, name)
	beforeB := definitionOn(t, "b", name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := bed.Migrate(ctx, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry"})
	if err == nil || !strings.Contains(err.Error(), "refused (domain_defined_here)") || !strings.Contains(err.Error(), "--migration-adopt-defined") {
		t.Fatalf("a migration over b's shut-off definition: %v; want it refused as defined here", err)
	}
	t.Logf("refused: %v", err)
	onlyOn(t, name, "a", "b")
	if after := definitionOn(t, "b", name); !after.defined || after.xml != beforeB.xml {
		t.Errorf("node b's definition changed under a refused migration:\nbefore %s\nafter %s", beforeB.xml, after.xml)
	}
	if d := definitionOn(t, "a", name); !d.defined {
		t.Error("node a lost the definition of the guest it still runs")
	}
}
