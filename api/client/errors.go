package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Error is ferryd refusing or failing a request: its message, and the
// HTTP status that says which (404: no such job or domain, 409: not now
// or ambiguous, 400: a wrong request, 502: libvirt or a peer failed).
type Error struct {
	Status  int
	Message string
}

// Error is ferryd's message alone: it names what was wrong.
func (e *Error) Error() string { return e.Message }

// UnreachableError is ferryd's debug socket failing, as opposed to ferryd
// answering no: nothing there, nobody listening, no permission, no answer
// in time, or a watch stream cut.
type UnreachableError struct {
	// Socket is the debug socket's path.
	Socket string
	// Err is the cause, if there is one beyond the message.
	Err error
	msg string
}

// Error says why the socket could not be used and what usually fixes it.
func (e *UnreachableError) Error() string { return e.msg }
func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable explains why the debug socket could not be used and what
// usually fixes it.
func (c *Client) unreachable(err error) *UnreachableError {
	s := c.socket
	fix := "point ferryctl at ferryd's --debug-socket with --socket or FERRY_SOCKET"
	var msg string
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		msg = fmt.Sprintf("cannot reach ferryd: its debug socket %s does not exist: ferryd is not running on this node, or it serves another path (%s)", s, fix)
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("cannot reach ferryd: nothing listens on %s: the socket is left from a ferryd that is no longer running; start ferryd (on Kubernetes, check the ferry pod on this node)", s)
	case errors.Is(err, fs.ErrPermission):
		msg = fmt.Sprintf("cannot reach ferryd: permission denied on its debug socket %s%s: run ferryctl as the socket's owner (e.g. with sudo); the socket can migrate, abort and pause guests, so widen ferryd's --debug-socket-mode only to a group of node operators", s, ownerOf(s))
	case errors.Is(err, syscall.ENOTSOCK) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		msg = fmt.Sprintf("cannot reach ferryd at %s: %v: is that path ferryd's debug socket? (%s)", s, rootCause(err), fix)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("ferryd at %s did not answer in time: it is hung or overloaded; its log says more", s)
	default:
		msg = fmt.Sprintf("cannot reach ferryd at %s: %v (is it running? %s)", s, rootCause(err), fix)
	}
	return &UnreachableError{Socket: s, Err: err, msg: msg}
}

// ownerOf names the socket's mode and owner, or why it cannot be looked
// at: whoever is refused needs to know whose it is.
func ownerOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf(" (%v)", rootCause(err))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf(" (mode %04o, owner uid %d gid %d; you are uid %d)", fi.Mode().Perm(), st.Uid, st.Gid, os.Getuid())
	}
	return fmt.Sprintf(" (mode %04o)", fi.Mode().Perm())
}

// rootCause strips the layers net/http and net add, which repeat the
// socket's path and the request's URL.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
