package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// Whoever reads the debug API must not learn the IDs that let streams into
// a prepared migration; the reference still tells migrations apart.
func TestDebugAPIShowsNoMigrationSecrets(t *testing.T) {
	const secret = "m-0123456789abcdef"
	reg := redactRegistered([]proxy.Migration{{ID: secret, Domain: "vm", Targets: map[peer.Kind]string{peer.KindMemory: "/run/ferry/migrationproxy/" + secret + "-49152-target.sock"}},
		{ID: "m-other", Domain: "vm2"}, {ID: "m-recovery", Domain: "vm", RecoveryOf: secret}})
	d := &Daemon{}
	j := d.forAPI(api.Job{Domain: "vm", IncomingID: secret})
	b, _ := json.Marshal(struct {
		R []api.ProxyMigration
		J api.Job
	}{reg, j})
	if strings.Contains(string(b), secret) {
		t.Fatalf("the reply carries the migration ID: %s", b)
	}
	if _, ok := reg[0].Targets["memory"]; !ok {
		t.Errorf("streams %v, want them by name (memory)", reg[0].Targets)
	}
	if reg[0].ID == reg[1].ID || reg[0].ID != j.IncomingID || reg[2].RecoveryOf != reg[0].ID || !strings.HasPrefix(j.IncomingID, "ref-") {
		t.Errorf("references %q, %q, %q: want one per migration, the same on the job", reg[0].ID, reg[1].ID, j.IncomingID)
	}
}
