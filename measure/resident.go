package measure

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxSmaps bounds what is read of a QEMU's /proc/PID/smaps.
const maxSmaps = 64 << 20

// guestResident is how much of the guest's RAM is resident: the Rss of
// QEMU's mapping of it, the one mapping of exactly the guest's memory size
// (QEMU maps a guest's RAM block once, whatever its guest-physical layout).
// QEMU's resident set as a whole also counts QEMU's own memory, some
// 80-95 MiB more for a 512 MiB guest under TCG on the test bed; a page of
// guest RAM never touched is not resident,
// and a migration sends it as a zero page, at next to no cost.
func guestResident(pid int, memBytes uint64) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return residentOfSize(io.LimitReader(f, maxSmaps), memBytes>>10)
}

// residentOfSize reads smaps for the mappings of sizeKiB and sums their Rss.
func residentOfSize(r io.Reader, sizeKiB uint64) (uint64, error) {
	sc := bufio.NewScanner(r)
	var size, found uint64
	var match, any bool
	for sc.Scan() {
		field, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.Contains(field, " ") {
			continue // a mapping's header line, or none of ours
		}
		v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch field {
		case "Size":
			size = v
			match = size == sizeKiB
		case "Rss":
			if match {
				found += v << 10
				any = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !any {
		return 0, fmt.Errorf("no mapping of the guest's %d KiB", sizeKiB)
	}
	return found, nil
}
