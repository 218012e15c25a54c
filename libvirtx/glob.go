package libvirtx

import (
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// glob is filepath.Glob of the clean pattern, except that a component
// without wildcards is looked up, not listed. The launcher glob
// (pods/*/volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock)
// then costs one listing of the pods directory and a lookup or two per
// pod, where filepath.Glob lists every directory on the way of every pod:
// a node of a hundred pods is scanned every few seconds, and on every pod
// that comes or goes.
func glob(pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, err
	}
	pattern = filepath.Clean(pattern)
	if !hasMeta(pattern) {
		if _, err := os.Lstat(pattern); err != nil {
			return nil, nil
		}
		return []string{pattern}, nil
	}
	if head, tail := literalTail(pattern); tail != "" {
		// One lookup: the kernel walks the tail as filepath.Glob would,
		// each component on the way a directory (links followed).
		heads, err := glob(head)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, h := range heads {
			if _, err := os.Lstat(filepath.Join(h, tail)); err == nil {
				out = append(out, filepath.Join(h, tail))
			}
		}
		return out, nil
	}
	dir, file := filepath.Split(pattern)
	dir = cleanGlobDir(dir)
	dirs := []string{dir}
	if hasMeta(dir) {
		var err error
		if dirs, err = glob(dir); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, d := range dirs {
		out = append(out, matchIn(d, file)...)
	}
	return out, nil
}

// literalTail splits pattern after its last component with a wildcard:
// tail is "" when that is the last component.
func literalTail(pattern string) (head, tail string) {
	head = pattern
	for !hasMeta(filepath.Base(head)) {
		dir := filepath.Dir(head)
		if dir == head {
			return pattern, ""
		}
		head = dir
	}
	if head == pattern {
		return pattern, ""
	}
	return head, pattern[len(head)+1:]
}

// matchIn lists dir's names that match pattern, sorted, as filepath.Glob
// does for one directory.
func matchIn(dir, pattern string) []string {
	// Only a directory is opened, never blocking: a pod's FIFO or device
	// where the glob expects a directory is no directory to list.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), dir)
	names, _ := f.Readdirnames(-1)
	f.Close()
	slices.Sort(names)
	var out []string
	for _, n := range names {
		if ok, _ := filepath.Match(pattern, n); ok {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// cleanGlobDir is the directory part of a split pattern without its
// trailing separator, as filepath.Glob cleans it.
func cleanGlobDir(dir string) string {
	switch dir {
	case "":
		return "."
	case string(filepath.Separator):
		return dir
	}
	return dir[:len(dir)-1]
}

// globRoot is the directory of pattern above its first component with a
// wildcard: the operator's, whose links are theirs to follow. Below it the
// glob reaches into what pods write (see DialMatched).
func globRoot(pattern string) string {
	pattern = filepath.Clean(pattern)
	root := filepath.Dir(pattern)
	for p := pattern; ; {
		if hasMeta(filepath.Base(p)) {
			root = filepath.Dir(p)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return root
		}
		p = parent
	}
}
