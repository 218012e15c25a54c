// Package unixsock dials unix sockets at paths of any length.
//
// A unix socket address holds at most 107 bytes of path, and KubeVirt's
// launcher sockets are longer than that where the kubelet keeps them:
// /var/lib/kubelet/pods/<36-byte pod UID>/volumes/kubernetes.io~empty-dir/
// libvirt-runtime/virtqemud-sock is 121 bytes, and connect(2) refuses it
// with EINVAL. A longer path is reached through its directory instead: the
// directory is opened O_PATH and the socket dialed as
// /proc/self/fd/N/<name>, which names the same inode in a few bytes.
package unixsock

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest path a unix socket address holds (sun_path less
// its terminating NUL).
const MaxPath = len(unix.RawSockaddrUnix{}.Path) - 1

// Dial connects to the unix stream socket at path, however long the path.
// Errors name path, never the /proc alias it was dialed through.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= MaxPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, name := filepath.Split(path)
	if name == "" {
		return nil, dialError(path, fmt.Errorf("%d-byte path ends in a slash, naming no socket", len(path)))
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dialError(path, fmt.Errorf("opening its directory: %w", err))
	}
	// connect(2) on a unix stream socket completes or fails at once, so the
	// directory is only needed until DialContext returns.
	defer unix.Close(fd)
	short := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
	if len(short) > MaxPath {
		return nil, dialError(path, fmt.Errorf("socket name %q alone is too long for a unix address", name))
	}
	c, err := d.DialContext(ctx, "unix", short)
	if err != nil {
		if oe, ok := err.(*net.OpError); ok {
			// The caller asked for path; the alias means nothing to them.
			return nil, dialError(path, oe.Err)
		}
		return nil, dialError(path, err)
	}
	return c, nil
}

func dialError(path string, err error) error {
	return &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: err}
}
