package libvirtx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
)

func TestDecodeJobStatsConvertsPagesToBytes(t *testing.T) {
	p := func(f string, v any) libvirt.TypedParam {
		return libvirt.TypedParam{Field: f, Value: libvirt.TypedParamValue{I: v}}
	}
	s := DecodeJobStats(2, []libvirt.TypedParam{
		p("operation", int32(5)), p("time_elapsed", uint64(1500)), p("memory_remaining", uint64(100<<20)),
		p("memory_dirty_rate", uint64(1000)), p("memory_page_size", uint64(4096)), p("memory_iteration", uint64(3)),
		p("memory_bps", uint64(50<<20)), p("data_total", uint64(512<<20)), p("errmsg", "boom"), p("unknown_future_field", uint64(7)),
	})
	if s.Type != JobUnbounded || s.Operation != OperationMigrationOut || !s.Type.Active() {
		t.Fatalf("type %v op %d", s.Type, s.Operation)
	}
	if s.MemoryDirtyRate != 1000*4096 || s.MemoryIteration != 3 || s.MemoryBps != 50<<20 || s.TimeElapsedMs != 1500 || s.ErrMsg != "boom" {
		t.Fatalf("decoded %+v", s)
	}
}

func TestNames(t *testing.T) {
	if got := ReasonName(StatePaused, PausedPostCopyFailed); got != "post-copy-failed" {
		t.Errorf("paused/13 = %q", got)
	}
	if got := ReasonName(StateRunning, RunningPostCopyFailed); got != "post-copy-failed" {
		t.Errorf("running/11 = %q", got)
	}
	if got := EventName(EventSuspended, SuspendedPostCopyFailed); got != "suspended/post-copy-failed" {
		t.Errorf("3/8 = %q", got)
	}
	if got := EventName(42, 1); got != "event(42)/1" {
		t.Errorf("unknown event = %q", got)
	}
	if got := UUIDString(libvirt.UUID{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00}); got != "11223344-5566-7788-99aa-bbccddeeff00" {
		t.Errorf("uuid %q", got)
	}
}

func TestProcessCPUSecondsAndV1Paths(t *testing.T) {
	stat := filepath.Join(t.TempDir(), "stat")
	// A command name with spaces and a ')' must not shift the fields.
	os.WriteFile(stat, []byte("4242 (qemu-system) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 566 0 0 20 0 4 0 1000 0 0\n"), 0o600)
	if secs, err := processCPUSeconds(stat); err != nil || secs != 18.0 {
		t.Fatalf("cpu seconds %v %v, want 18 (utime 1234 + stime 566 ticks)", secs, err)
	}
	paths := map[string]string{"cpu,cpuacct": "/machine/qemu-1-vm.libvirt-qemu/emulator", "memory": "/machine/qemu-1-vm.libvirt-qemu"}
	if p := v1Path(paths, "cpuacct"); p != "/machine/qemu-1-vm.libvirt-qemu" {
		t.Errorf("co-mounted cpuacct: %q", p)
	}
	if p := v1Path(map[string]string{"cpu": "/machine/x/emulator", "cpuacct": "/"}, "cpuacct"); p != "/" {
		t.Errorf("root cpuacct: %q", p)
	}
}

// As libvirt 11.3 answers virDomainGetMetadata for KubeVirt's namespace.
func TestKubeVirtUIDFromTheMetadataElement(t *testing.T) {
	const uid = "9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6f"
	if got := uidOfElement("<kubevirt>\n  <uid>" + uid + "</uid>\n</kubevirt>"); got != uid {
		t.Fatalf("uid %q", got)
	}
	if got := uidOfElement("<kubevirt/>"); got != "" {
		t.Fatalf("uid %q from an element without one", got)
	}
}

// A pod's libvirt writes what it likes: only a UUID is taken for a UID.
func TestAKubeVirtUIDThatIsNoUUIDIsNotTaken(t *testing.T) {
	for _, bad := range []string{"1234-uid", strings.Repeat("a", 3<<20), "9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6", "9f2b6c1e_4d3a-4b7e-8c5f-1a2b3c4d5e6f", "9f2b6c1e-4d3a-4b7e-8c5f-1a2b3c4d5e6g"} {
		if got := uidOfElement("<kubevirt><uid>" + bad + "</uid></kubevirt>"); got != "" {
			t.Errorf("uid %.40q taken", got)
		}
	}
}
