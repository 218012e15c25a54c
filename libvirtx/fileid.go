package libvirtx

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Two domains take the same file when their paths reach the same file, not
// when they spell it alike: a hard link, a link in a directory of the path,
// a bind mount, /dev/mapper/vg-lv and /dev/vg/lv and /dev/dm-3 each name
// one file twice. So files are compared by what they are: a regular file
// by its device and inode, a block device by its number and by the
// devices it is built on, and a partition overlaps its whole disk. A path
// that does not exist (yet) is compared as it is spelt.

// sysBlock is where the kernel shows each block device, by its number.
var sysBlock = "/sys/dev/block"

// maxBlockStack bounds the devices followed under one block device.
const maxBlockStack = 64

// fileKeys are what a path reaches: self, the file itself; under, for a
// block device, every device it is built on (a device-mapper target's
// slaves, recursively) and the whole disk of each partition among them.
// Two paths overlap when they are one file or one is built on the other.
// Two devices built side by side on a third (two logical volumes of one
// volume group) do not: which ranges of it each maps is not looked at.
type fileKeys struct {
	self  string
	under []string
}

// fileIDs looks paths up once each.
type fileIDs map[string]fileKeys

func (ids fileIDs) of(p string) fileKeys {
	if k, ok := ids[p]; ok {
		return k
	}
	k := lookupWithin(&fileLookups, p, func() fileKeys { return keysOf(p) }, fileKeys{self: "path " + p})
	ids[p] = k
	return k
}

// overlap says whether paths a and b reach a common file.
func (ids fileIDs) overlap(a, b string) bool {
	ka, kb := ids.of(a), ids.of(b)
	return ka.self == kb.self || slices.Contains(kb.under, ka.self) || slices.Contains(ka.under, kb.self)
}

func keysOf(p string) fileKeys {
	var st unix.Stat_t
	if unix.Stat(p, &st) == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			// A file lies on its filesystem's block device: a guest that
			// takes that device takes the file.
			k := fileKeys{self: fmt.Sprintf("file %d:%d", st.Dev, st.Ino)}
			if major := unix.Major(st.Dev); major != 0 {
				b := blockKeys(fmt.Sprintf("%d:%d", major, unix.Minor(st.Dev)))
				k.under = append([]string{b.self}, b.under...)
			}
			return k
		case unix.S_IFBLK:
			return blockKeys(fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		}
	}
	return fileKeys{self: "path " + p}
}

// blockKeys follows block device dev ("major:minor") down the devices it
// is built on.
func blockKeys(dev string) fileKeys {
	k := fileKeys{self: "block " + dev}
	seen := map[string]bool{}
	queue := []string{dev}
	for len(queue) > 0 && len(seen) < maxBlockStack {
		d := queue[0]
		queue = queue[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		if d != dev {
			k.under = append(k.under, "block "+d)
		}
		if disk := wholeDisk(d); disk != "" {
			k.under = append(k.under, "block "+disk)
		}
		queue = append(queue, slaves(d)...)
	}
	return k
}

// wholeDisk is the disk partition d is of, or "" if d is no partition.
func wholeDisk(d string) string {
	dir := filepath.Join(sysBlock, d)
	if _, err := os.Stat(filepath.Join(dir, "partition")); err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	return devNumber(filepath.Dir(real))
}

// slaves are the devices d is built on.
func slaves(d string) []string {
	dir := filepath.Join(sysBlock, d, "slaves")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if n := devNumber(filepath.Join(dir, e.Name())); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// devNumber reads a sysfs device directory's "major:minor".
func devNumber(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
