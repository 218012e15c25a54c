package libvirtx

import (
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// recoveryChardev names the QMP monitor Ferry gives a target QEMU of a
// post-copy migration, so that a broken migration can be resumed while
// libvirt's failed job holds the domain (see qmp.go).
const recoveryChardev = "ferry-recovery"

func recoveryArgs(path string) []libvirtxml.DomainQEMUCommandlineArg {
	return []libvirtxml.DomainQEMUCommandlineArg{
		{Value: "-chardev"}, {Value: "socket,id=" + recoveryChardev + ",path=" + path + ",server=on,wait=off"},
		{Value: "-mon"}, {Value: "chardev=" + recoveryChardev + ",mode=control"},
	}
}

// WithRecoveryMonitor adds Ferry's QMP monitor at path to a domain XML
// this node has checked (the peer's own never carries QEMU pass-through).
func WithRecoveryMonitor(domXML, path string) (string, error) {
	if strings.ContainsAny(path, ",= \n") || !strings.HasPrefix(path, "/") {
		// QEMU's option syntax would read more into it.
		return "", fmt.Errorf("recovery monitor path %q: it must be absolute, with no comma, '=' or space", path)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return "", err
	}
	if d.QEMUCommandline != nil {
		return "", fmt.Errorf("domain %s already has QEMU pass-through", d.Name)
	}
	d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: recoveryArgs(path)}
	return d.Marshal()
}

// WithoutRecoveryMonitor takes the monitor an earlier Ferry target gave
// this guest out of its XML before the XML goes to another node, which
// would refuse any pass-through. Other pass-through is left for the
// target to refuse.
func WithoutRecoveryMonitor(domXML string) (string, error) {
	if !strings.Contains(domXML, recoveryChardev) {
		return domXML, nil
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(domXML); err != nil {
		return "", err
	}
	cl := d.QEMUCommandline
	if cl == nil || len(cl.Envs) > 0 || len(cl.Args) != 4 {
		return domXML, nil
	}
	path, ok := strings.CutPrefix(cl.Args[1].Value, "socket,id="+recoveryChardev+",path=")
	path, ok2 := strings.CutSuffix(path, ",server=on,wait=off")
	if !ok || !ok2 || !slices.Equal(cl.Args, recoveryArgs(path)) {
		return domXML, nil
	}
	d.QEMUCommandline = nil
	return d.Marshal()
}
