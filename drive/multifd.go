package drive

import (
	"context"
	"fmt"

	"github.com/ferry-vm/ferry/libvirtx"
)

// multifdWithPostCopy says why a migration cannot have multifd (parallel
// connections, and the compression on them) together with post-copy, ""
// if it does not ask for both. QEMU 10.0 refuses the pair outright. QEMU
// 10.1 takes it, but through Ferry's proxy its target QEMU was stopped
// right after the switch (zstd on two channels, QEMU 11.1, see
// docs/support.md): the guest's memory split, with no target left to
// resume it. Refused on every QEMU until the proxy carries it.
func multifdWithPostCopy(multifd, postCopy bool) string {
	if !multifd || !postCopy {
		return ""
	}
	return "multifd (parallel connections, and the compression on them) cannot be had with post-copy: QEMU 10.0 refuses the pair, " +
		"and through Ferry's proxy a QEMU 11.1 target was stopped at the switch"
}

// multifdByPeekQEMU is the first QEMU that tells an incoming connection's
// kind by its first bytes; an older one takes the first as the main stream
// and the rest as multifd channels, in the order they arrive, which a
// relay of connections opened at once does not keep.
const multifdByPeekQEMU = 8_000_000

// multifdInto says why this node's QEMU cannot take a multifd migration
// through the proxy, "" if it can or the migration has no multifd.
func multifdInto(ctx context.Context, conn *libvirtx.Conn, multifd bool) (string, error) {
	if !multifd {
		return "", nil
	}
	v, err := conn.HypervisorVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("asking which QEMU runs here, which says whether it takes multifd through the proxy: %w", err)
	}
	if v >= multifdByPeekQEMU {
		return "", nil
	}
	return fmt.Sprintf("QEMU %s here tells multifd channels from the main stream only by the order they arrive, which the proxy's relay does not keep; "+
		"migrate it without parallel connections", libvirtx.VersionString(v)), nil
}
