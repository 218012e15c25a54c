package proxy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// RelayEngine says how this proxy moves relayed bytes, for its start-up
// log: plain streams are spliced in the kernel; TLS streams are encrypted
// in user space, since Go's TLS cannot hand its keys to the kernel. It
// says too whether the kernel offers TLS (the "tls" TCP upper layer
// protocol, CONFIG_TLS), which a kernel-TLS relay would need.
func RelayEngine() string {
	return "plain: splice(2); TLS: in user space, records gathered into large socket calls (" + kernelTLS() + ")"
}

// kernelTLS reads what the kernel offers without asking for it: setting
// the option on a socket would load the tls module for every local user,
// for the sake of a log line.
func kernelTLS() string {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_ulp"); err == nil && slices.Contains(strings.Fields(string(b)), "tls") {
		return "kernel TLS is loaded; Ferry does not use it"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		release := unix.ByteSliceToString(u.Release[:])
		if m, _ := filepath.Glob(filepath.Join("/lib/modules", release, "kernel/net/tls/tls.ko*")); len(m) > 0 {
			return "kernel TLS is a module, not loaded; Ferry does not use it"
		}
	}
	return "this kernel does not offer kernel TLS"
}
