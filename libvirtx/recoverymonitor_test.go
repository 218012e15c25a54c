package libvirtx

import (
	"strings"
	"testing"
)

func TestRecoveryMonitorGoesOnAndComesOffAgain(t *testing.T) {
	canon, err := CanonicalIncomingXML(guestXML("vm", "", ""), "vm", policyForTest)
	if err != nil {
		t.Fatal(err)
	}
	with, err := WithRecoveryMonitor(canon, "/run/ferry/migration/abc-qmp.sock")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(with, "socket,id=ferry-recovery,path=/run/ferry/migration/abc-qmp.sock,server=on,wait=off") ||
		!strings.Contains(with, "chardev=ferry-recovery,mode=control") {
		t.Fatalf("no monitor in:\n%s", with)
	}
	// The next node refuses pass-through: what leaves this one has none.
	if _, err := CanonicalIncomingXML(with, "vm", policyForTest); err == nil {
		t.Fatal("a target took QEMU pass-through")
	}
	without, err := WithoutRecoveryMonitor(with)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(without, "ferry-recovery") {
		t.Fatalf("monitor left in:\n%s", without)
	}
	if _, err := CanonicalIncomingXML(without, "vm", policyForTest); err != nil {
		t.Fatalf("the stripped XML is refused: %v", err)
	}
}

func TestOnlyFerrysOwnMonitorIsTakenOff(t *testing.T) {
	for name, cl := range map[string]string{
		"other args":  `<qemu:commandline><qemu:arg value='-chardev'/><qemu:arg value='socket,id=ferry-recovery,path=/x,server=on,wait=off'/><qemu:arg value='-device'/><qemu:arg value='evil'/></qemu:commandline>`,
		"extra arg":   `<qemu:commandline><qemu:arg value='-chardev'/><qemu:arg value='socket,id=ferry-recovery,path=/x,server=on,wait=off'/><qemu:arg value='-mon'/><qemu:arg value='chardev=ferry-recovery,mode=control'/><qemu:arg value='-x'/></qemu:commandline>`,
		"env":         `<qemu:commandline><qemu:arg value='-chardev'/><qemu:arg value='socket,id=ferry-recovery,path=/x,server=on,wait=off'/><qemu:arg value='-mon'/><qemu:arg value='chardev=ferry-recovery,mode=control'/><qemu:env name='A' value='ferry-recovery'/></qemu:commandline>`,
		"smuggled in": `<qemu:commandline><qemu:arg value='-chardev'/><qemu:arg value='socket,id=ferry-recovery,path=/x,server=on,wait=off,x=y'/><qemu:arg value='-mon'/><qemu:arg value='chardev=ferry-recovery,mode=control'/></qemu:commandline>`,
	} {
		x := guestXML("vm", cl, "")
		got, err := WithoutRecoveryMonitor(x)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != x {
			t.Errorf("%s: changed to\n%s", name, got)
		}
	}
}

func TestRecoveryMonitorPathIsChecked(t *testing.T) {
	for _, p := range []string{"relative.sock", "/a,b.sock", "/a=b", "/a b"} {
		if _, err := WithRecoveryMonitor(guestXML("vm", "", ""), p); err == nil {
			t.Errorf("%q taken", p)
		}
	}
}
