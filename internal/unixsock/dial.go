// Package unixsock dials unix sockets at paths of any length, and, where
// a neighbour controls the path, only sockets that are not links.
//
// A unix socket address holds at most 107 bytes of path, and KubeVirt's
// launcher sockets are longer than that where the kubelet keeps them:
// /var/lib/kubelet/pods/<36-byte pod UID>/volumes/kubernetes.io~empty-dir/
// libvirt-runtime/virtqemud-sock is 121 bytes, and connect(2) refuses it
// with EINVAL. Such a socket is opened O_PATH and dialed as
// /proc/self/fd/N, which names the same inode in a few bytes.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest path a unix socket address holds (sun_path less
// its terminating NUL).
const MaxPath = len(unix.RawSockaddrUnix{}.Path) - 1

// Dial connects to the unix stream socket at path, however long the path.
// Symbolic links are followed, as connect(2) follows them.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	if len(path) <= MaxPath {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	return dialInode(ctx, path)
}

// DialSocket connects to path only if path itself is a unix socket, not a
// symbolic link to one, however long the path. The check and the connect
// use one descriptor of one inode, so the name cannot be swapped for a link
// between them: for paths a neighbour may write, such as a pod's volume.
func DialSocket(ctx context.Context, path string) (net.Conn, error) {
	return DialSocketBeneath(ctx, filepath.Dir(path), path)
}

// DialSocketBeneath is DialSocket where a neighbour may write every
// directory below root as well (a glob's wildcards reach into a pod's
// volume): no link is followed from root down, each component opened
// beneath the last. root itself is the caller's, and its links are
// followed.
func DialSocketBeneath(ctx context.Context, root, path string) (net.Conn, error) {
	fd, err := openBeneath(root, path)
	if err != nil {
		return nil, dialError(path, err)
	}
	return dialFD(ctx, path, fd)
}

// openBeneath opens path O_PATH, walking it down from root one component
// at a time and following no link.
func openBeneath(root, path string) (int, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return -1, fmt.Errorf("not beneath %s: not dialed", root)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	comps := strings.Split(rel, string(filepath.Separator))
	for i, comp := range comps {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(comps)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(fd, comp, flags, 0)
		unix.Close(fd)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%s is a symbolic link or no directory: not dialed", filepath.Join(append([]string{root}, comps[:i+1]...)...))
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// dialInode dials a path too long for a unix address through its inode,
// links followed as connect(2) follows them.
func dialInode(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dialError(path, err)
	}
	return dialFD(ctx, path, fd)
}

// dialFD connects to the socket fd (O_PATH) names, which it closes.
func dialFD(ctx context.Context, path string, fd int) (net.Conn, error) {
	// connect(2) on a unix stream socket completes or fails at once, so the
	// descriptor is only needed until DialContext returns.
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, dialError(path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, dialError(path, fmt.Errorf("not a unix socket (%s): not dialed", kind(st.Mode)))
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		if oe, ok := err.(*net.OpError); ok {
			// The caller asked for path; the alias means nothing to them.
			err = oe.Err
		}
		return nil, dialError(path, err)
	}
	return c, nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFIFO:
		return "named pipe"
	default:
		return "device"
	}
}

func dialError(path string, err error) error {
	return &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: err}
}
