package preflight

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// sharedFS are the filesystems whose files another host sees the same
// (the kinds libvirt's own check takes for shared storage), by magic.
var sharedFS = map[int64]string{
	0x6969:     "nfs",
	0xFF534D42: "cifs",
	0xFE534D42: "smb2",
	0x517B:     "smb",
	0x00C36400: "ceph",
	0x01161970: "gfs2",
	0x7461636f: "ocfs2",
	0x5346414F: "afs",
	0x47504653: "gpfs",
	0x65735546: "fuse",
}

// Storage says whether path is on storage another host shares, and the
// filesystem's kind. root is the directory the path is resolved beneath
// without leaving it ("/" on a plain host, /proc/PID/root for a QEMU in
// a pod), so a pod's links cannot point the look elsewhere.
func Storage(root, path string) (shared bool, kind string, err error) {
	if !filepath.IsAbs(path) {
		return false, "", fmt.Errorf("disk path %q is not absolute", path)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_DIRECTORY})
	if err != nil {
		return false, "", fmt.Errorf("opening %s: %w", root, err)
	}
	defer unix.Close(fd)
	f, err := unix.Openat2(fd, path[1:], &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return false, "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(f)
	var st unix.Statfs_t
	if err := unix.Fstatfs(f, &st); err != nil {
		return false, "", fmt.Errorf("statfs %s: %w", path, err)
	}
	if k, ok := sharedFS[int64(st.Type)]; ok {
		return true, k, nil
	}
	return false, fmt.Sprintf("local (0x%x)", uint64(st.Type)), nil
}
