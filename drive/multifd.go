package drive

import (
	"context"
	"fmt"

	"github.com/ferry-vm/ferry/libvirtx"
)

// multifdWithPostCopyQEMU is the first QEMU that takes multifd channels,
// and the compression on them, together with post-copy: 10.0 takes
// multifd only without it, 10.1 takes both (as KubeVirt and Nova allow).
const multifdWithPostCopyQEMU = 10_001_000

// multifdWithPostCopy says why the QEMU behind conn cannot have multifd
// together with post-copy, "" if it can; it is asked only of a migration
// that would have both.
func multifdWithPostCopy(ctx context.Context, conn *libvirtx.Conn, multifd, postCopy bool) (string, error) {
	if !multifd || !postCopy {
		return "", nil
	}
	v, err := conn.HypervisorVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("asking which QEMU runs here, which says whether it takes multifd with post-copy: %w", err)
	}
	if v >= multifdWithPostCopyQEMU {
		return "", nil
	}
	return fmt.Sprintf("QEMU %d.%d.%d here takes multifd (parallel connections, and the compression on them) only without post-copy; 10.1 and newer take both",
		v/1_000_000, v/1000%1000, v%1000), nil
}
