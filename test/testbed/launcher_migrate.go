package testbed

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// LauncherMigration is a live migration between two launchers of one VMI,
// on different nodes, as KubeVirt runs it.
type LauncherMigration struct {
	From, To *Launcher
	// PostCopyAfter > 0 enables post-copy and asks for the switch that
	// long after the start, again until QEMU takes it: a switch asked
	// before QEMU's migration is active is refused, not queued.
	PostCopyAfter         time.Duration
	BandwidthMiBs         int
	PostCopyBandwidthMiBs int
}

// KubeVirt's migration socket names, in the launchers' migrationproxy
// directory (pkg/virt-handler/migration-proxy): libvirt's own connection
// and the memory stream (port 49152), "-source" on both nodes, since the
// target QEMU listens where the source's migrate URI says.
func launcherLibvirtProxy(vmiUID string) string {
	return filepath.Join(MigrationProxyDir, vmiUID+"-source.sock")
}

func launcherMemoryProxy(vmiUID string) string {
	return filepath.Join(MigrationProxyDir, vmiUID+"-49152-source.sock")
}

// MigrateLauncher migrates the VMI's domain from one launcher to the other
// the way virt-launcher and virt-handler do: the source daemon migrates
// peer-to-peer to qemu+unix:///session through a unix socket in its pod,
// its QEMU sends memory to another, and the relays standing in for both
// virt-handlers carry each over the veth to the target launcher's libvirt
// socket and its QEMU's listening socket. It blocks until the migrate call
// returns and returns its error.
func (b *Bed) MigrateLauncher(ctx context.Context, m LauncherMigration) error {
	src, dst := m.From, m.To
	if src == nil || dst == nil || src.Node == dst.Node || src.Domain != dst.Domain || src.VMIUID != dst.VMIUID {
		return fmt.Errorf("testbed: a launcher migration needs two launchers of one VMI on different nodes")
	}
	r, err := b.reserveRelay(src.Domain, src.Node, dst.Node)
	if err != nil {
		return err
	}
	defer b.finishRelays(r)
	dstIP := b.nodes[dst.Node].IP
	// socat makes virt-handler's sockets the launcher's (107, 0700).
	owned := fmt.Sprintf(",fork,unlink-early,user=%d,group=%d,mode=0700", launcherUID, launcherGID)
	libvirtSock, memSock := launcherLibvirtProxy(src.VMIUID), launcherMemoryProxy(src.VMIUID)
	specs := []relaySpec{
		{node: dst.Node, nsPID: dst.PID(), listen: fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", r.RPCPort, dstIP),
			connect: "UNIX-CONNECT:" + filepath.Join(launcherRuntime, "virtqemud-sock"), ready: tcpListening(r.RPCPort)},
		{node: dst.Node, nsPID: dst.PID(), listen: fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", r.MigPort, dstIP),
			connect: "UNIX-CONNECT:" + memSock, ready: tcpListening(r.MigPort)},
		{node: src.Node, nsPID: src.PID(), listen: "UNIX-LISTEN:" + libvirtSock + owned,
			connect: fmt.Sprintf("TCP:%s:%d", dstIP, r.RPCPort), ready: unixListening(libvirtSock)},
		{node: src.Node, nsPID: src.PID(), listen: "UNIX-LISTEN:" + memSock + owned,
			connect: fmt.Sprintf("TCP:%s:%d", dstIP, r.MigPort), ready: unixListening(memSock)},
	}
	for _, s := range specs {
		if err := b.runRelay(r, s, launcherGID); err != nil {
			return err
		}
	}

	c, err := src.Libvirt()
	if err != nil {
		return err
	}
	defer c.Disconnect()
	dom, err := c.DomainLookupByName(src.Domain)
	if err != nil {
		return fmt.Errorf("testbed: %s in launcher %s: %w", src.Domain, src.PodUID, err)
	}
	// KubeVirt's flags for a live migration (live-migration-source.go).
	flags := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest
	if m.PostCopyAfter > 0 {
		flags |= libvirt.MigratePostcopy
	}
	params := []libvirt.TypedParam{{Field: libvirt.MigrateParamURI, Value: *libvirt.NewTypedParamValueString("unix://" + memSock)}}
	if m.BandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidth, Value: *libvirt.NewTypedParamValueUllong(uint64(m.BandwidthMiBs))})
	}
	if m.PostCopyBandwidthMiBs > 0 {
		params = append(params, libvirt.TypedParam{Field: libvirt.MigrateParamBandwidthPostcopy, Value: *libvirt.NewTypedParamValueUllong(uint64(m.PostCopyBandwidthMiBs))})
	}
	dconnuri := "qemu+unix:///session?socket=" + libvirtSock
	logf(b.cfg.Log, "migrating %s from launcher %s (node %s) to launcher %s (node %s), flags %#x",
		src.Domain, src.PodUID, src.Node, dst.PodUID, dst.Node, uint32(flags))
	t0 := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.DomainMigratePerform3Params(dom, libvirt.OptString{dconnuri}, params, nil, flags)
		done <- err
	}()
	var switchC <-chan time.Time
	if m.PostCopyAfter > 0 {
		switchC = time.After(m.PostCopyAfter)
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				logf(b.cfg.Log, "migration of %s failed after %.1fs: %v", src.Domain, time.Since(t0).Seconds(), err)
				return fmt.Errorf("testbed: migrating %s from node %s to node %s: %w", src.Domain, src.Node, dst.Node, err)
			}
			logf(b.cfg.Log, "migrated %s from node %s to node %s in %.1fs", src.Domain, src.Node, dst.Node, time.Since(t0).Seconds())
			return nil
		case <-switchC:
			if err := c.DomainMigrateStartPostCopy(dom, 0); err != nil {
				switchC = time.After(200 * time.Millisecond)
				continue
			}
			switchC = nil
			logf(b.cfg.Log, "switched %s to post-copy after %.1fs", src.Domain, time.Since(t0).Seconds())
		case <-ctx.Done():
			return b.abortMigration(c, dom, done, ctx.Err())
		}
	}
}
