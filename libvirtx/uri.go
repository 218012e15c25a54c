package libvirtx

import (
	"os"
	"syscall"

	libvirt "github.com/digitalocean/go-libvirt"
)

// driverURI is the QEMU driver URI the daemon behind socket accepts. A
// daemon running as root serves qemu:///system; one running as another
// user serves only qemu:///session and refuses the system URI ("unexpected
// QEMU URI path '/system', try qemu:///session"). KubeVirt's virt-launcher
// runs virtqemud as uid 107 in session mode. A daemon creates its socket
// as the user it runs as, so the socket's owner tells which it is before a
// single call is made. The socket itself is asked, never what a link
// there points to: a pod may plant one at a path it owns.
func driverURI(socket string) libvirt.ConnectURI {
	fi, err := os.Lstat(socket)
	if err != nil {
		// The dial fails on its own and says why.
		return libvirt.QEMUSystem
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		return libvirt.QEMUSession
	}
	return libvirt.QEMUSystem
}
