package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/ferry-vm/ferry/migration"
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

func redactRegistered(ms []proxy.Migration) []proxy.Migration {
	out := make([]proxy.Migration, len(ms))
	for i, m := range ms {
		ref := idRef(m.ID)
		// The target sockets are named after the ID too.
		targets := make(map[proxy.Kind]string, len(m.Targets))
		for k, path := range m.Targets {
			targets[k] = strings.ReplaceAll(path, m.ID, ref)
		}
		m.ID, m.Targets = ref, targets
		out[i] = m
	}
	return out
}

// forAPI is a job as the debug API shows it.
func (d *Daemon) forAPI(j migration.Job) migration.Job {
	j.IncomingID = idRef(j.IncomingID)
	return d.withVMI(j)
}
