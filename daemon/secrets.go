package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/proxy"
)

// A prepared migration's ID is what lets a peer's streams into the target
// QEMU: the debug API shows a reference to it instead, enough to tell
// migrations apart and match them with the source's, never the ID itself.
func idRef(id string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return "ref-" + hex.EncodeToString(sum[:6])
}

func redactRegistered(ms []proxy.Migration) []api.ProxyMigration {
	out := make([]api.ProxyMigration, len(ms))
	for i, m := range ms {
		ref := idRef(m.ID)
		// The target sockets are named after the ID too.
		targets := make(map[string]string, len(m.Targets))
		limits := make(map[string]int, len(m.Limits))
		for k, path := range m.Targets {
			targets[k.String()] = strings.ReplaceAll(path, m.ID, ref)
		}
		for k, n := range m.Limits {
			limits[k.String()] = n
		}
		out[i] = api.ProxyMigration{ID: ref, Domain: m.Domain, Targets: targets, Limits: limits, Expires: m.Expires,
			State: m.State, PeerNode: m.PeerNode}
		if m.RecoveryOf != "" {
			out[i].RecoveryOf = idRef(m.RecoveryOf)
		}
	}
	return out
}

// socketsForAPI is the pool's view of its libvirt sockets on the wire.
func socketsForAPI(ss []libvirtx.SocketStatus) []api.SocketStatus {
	out := make([]api.SocketStatus, len(ss))
	for i, s := range ss {
		out[i] = api.SocketStatus{Socket: s.Socket, Up: s.Up, LibvirtVersion: s.LibVersion, QEMUVersion: s.QEMUVersion, LastError: s.LastError,
			Since: s.Since, Reconnects: s.Reconnects, LastPingMicro: s.LastPingMicro, UnresponsiveSince: s.UnresponsiveSince}
	}
	return out
}

// forAPI is a job as the debug API shows it.
func (d *Daemon) forAPI(j api.Job) api.Job {
	j.IncomingID = idRef(j.IncomingID)
	return d.withVMI(j)
}
