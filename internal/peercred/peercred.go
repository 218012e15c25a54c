// Package peercred reads who is at the other end of a local socket, as
// the kernel has it (SO_PEERCRED): not what the process says of itself.
package peercred

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// Of returns the credentials of c's peer, a unix socket's other end: its
// process, user and group when it connected or listened.
func Of(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}
