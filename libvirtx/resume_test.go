package libvirtx

import "testing"

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

func TestHasRecoveryMonitorFindsOnlyFerrysOwn(t *testing.T) {
	const dom = `<domain type="qemu"><name>g</name><memory>1024</memory><os><type>hvm</type></os></domain>`
	if HasRecoveryMonitor(dom) {
		t.Fatal("a domain without pass-through has a monitor")
	}
	with, err := WithRecoveryMonitor(dom, "/run/ferry/m-1-qmp.sock")
	if err != nil {
		t.Fatal(err)
	}
	if !HasRecoveryMonitor(with) {
		t.Fatalf("the monitor Ferry adds is not found:\n%s", with)
	}
}
