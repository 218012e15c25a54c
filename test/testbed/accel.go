package testbed

import (
	"os"
	"strings"
)

func detectAccel() (accel, reason string) {
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "tcg", err.Error()
	}
	virt := false
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				virt = virt || f == "vmx" || f == "svm"
			}
			break
		}
	}
	// A /dev/kvm without vmx/svm is a paravirtual KVM on which stock guest kernels hang at boot.
	if !virt {
		return "tcg", "no vmx/svm flag in /proc/cpuinfo"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", err.Error()
	}
	f.Close()
	return "kvm", ""
}
