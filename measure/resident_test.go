package measure

import (
	"strings"
	"testing"
)

// An excerpt of a TCG guest's QEMU smaps on the test bed: its 512 MiB of
// RAM, of which 300 MiB touched, and QEMU's own memory around it.
const smaps = `55d4c8a00000-55d4c8e5b000 r-xp 00000000 08:01 1234   /usr/bin/qemu-system-x86_64
Size:               4460 kB
Rss:                3120 kB
7f1a40000000-7f1a60000000 rw-p 00000000 00:00 0
Size:             524288 kB
KernelPageSize:        4 kB
Rss:              307200 kB
Pss:              307200 kB
7f1a60000000-7f1aa0000000 rwxp 00000000 00:00 0
Size:            1048576 kB
Rss:              131072 kB
`

func TestGuestResidentIsItsRAMsMapping(t *testing.T) {
	got, err := residentOfSize(strings.NewReader(smaps), 512<<10)
	if err != nil || got != 300<<20 {
		t.Fatalf("resident %d MiB, %v; want 300 MiB (not QEMU's own 131 MiB of code buffer)", got>>20, err)
	}
	if _, err := residentOfSize(strings.NewReader(smaps), 256<<10); err == nil {
		t.Fatal("a guest size no mapping has was found")
	}
}
