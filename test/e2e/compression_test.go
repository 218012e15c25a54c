//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// zstd on multifd channels through Ferry's proxy, on a slow link: the
// guest's pages (one changing byte each) leave the source compressed, the
// target QEMU takes them (libvirt prepared it for zstd too), and the
// guest's memory is whole. The source proxy's own count of the bytes it
// sent is a fraction of the guest's memory: compression happened before
// the wire, not as a name on the job.
func TestZstdCompressionThroughTheProxy(t *testing.T) {
	const name = "zstd"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 512, DirtyMiB: 256, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	start := time.Now()
	if err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 16, Parallel: 2, Compression: "zstd"}); err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	j := waitJob(t, "a", name, "Completed", 30*time.Second, drivenCompleted)
	if j.Proxy == nil || j.Proxy.Compression != "zstd" {
		t.Fatalf("the job does not say zstd: %+v", j.Proxy)
	}
	mem := j.Proxy.Bytes["memory"]
	if mem["connections"] != 3 {
		t.Errorf("the source proxy relayed %d memory connections, want 3 (main and 2 multifd)", mem["connections"])
	}
	cpu := 0.0
	if j.QEMU != nil {
		cpu = j.QEMU.CPUUsageSeconds
	}
	t.Logf("zstd on 2 channels at 16 MiB/s: %.1fs, %d passes, %s on the wire for a 512 MiB guest, source QEMU CPU %.1f s",
		j.EndTime.Sub(j.StartTime).Seconds(), j.Iteration, fmtMiB(mem["toTarget"]), cpu)
	if mem["toTarget"] > 128<<20 {
		t.Errorf("%s went over the wire for 512 MiB of guest memory, dirtied with one byte a page: not compressed", fmtMiB(mem["toTarget"]))
	}
	onlyOn(t, name, "b", "a")
	memoryIntact(t, name, before)
	assertTruth(t, name, "a", "b", start)
}

// Multifd with post-copy is refused by name before libvirt is asked, on
// every stack: QEMU 10.0 refuses the pair, and through Ferry's proxy a QEMU
// 11.1 target was stopped at the switch (docs/support.md). The guest stays
// where it is, whole.
func TestMultifdWithPostCopyIsRefusedByName(t *testing.T) {
	supported(t, "multifd-postcopy", "refused by Ferry, by name")
	const name = "mfpc"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: 8, Verify: true})
	before := verifiedSoFar(t, name)
	err := <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", BandwidthMiBs: 2,
		Parallel: 2, Compression: "zstd", PostCopyAfter: time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot be had with post-copy") {
		t.Fatalf("multifd with post-copy: %v; want it refused by name", err)
	}
	onlyOn(t, name, "a", "b")
	memoryIntact(t, name, before)
}

// Multifd into a QEMU older than 8.0, which tells its channels apart only
// by the order they arrive, is refused by the target, naming its QEMU,
// and the guest stays where it is; into a newer one it moves.
func TestMultifdIntoAQEMUBefore8IsRefusedByName(t *testing.T) {
	const name = "mfold"
	guest(t, testbed.GuestSpec{Name: name, MemoryMiB: 256, DirtyMiB: 64, DirtyRateMiBs: -1})
	l, err := bed.Libvirt("b")
	if err != nil {
		t.Fatal(err)
	}
	qemu, err := l.ConnectGetVersion()
	l.Disconnect()
	if err != nil {
		t.Fatal(err)
	}
	err = <-migrateAsync(t, testbed.MigrateSpec{Name: name, From: "a", To: "b", Via: "ferry", Parallel: 2})
	if qemu < 8_000_000 {
		supported(t, "multifd-old-qemu", "refused by the target, naming its QEMU (before 8.0)")
		if err == nil || !strings.Contains(err.Error(), "tells multifd channels from the main stream only by the order") {
			t.Fatalf("multifd into QEMU %d: %v; want the target's refusal naming its QEMU", qemu, err)
		}
		onlyOn(t, name, "a", "b")
		return
	}
	supported(t, "multifd-old-qemu", "yes")
	if err != nil {
		t.Fatalf("multifd into QEMU %d: %v", qemu, err)
	}
	onlyOn(t, name, "b", "a")
}
