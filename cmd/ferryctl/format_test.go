package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Text from libvirt, a peer or a domain name reaches the terminal without
// the control characters that would clear it or forge lines.
func TestJobOutputCarriesNoControlCharacters(t *testing.T) {
	evil := "x\x1b[2J\x1b[1;1Hroot ok\r\x07"
	j := api.Job{Domain: "vm" + evil, Role: api.RoleSource, Phase: api.PhaseFailed, StartTime: time.Now(),
		FailureReason: "refused: " + evil, FailurePlane: api.PlaneControl, FailureClass: api.ClassTargetRefused,
		FailureEvidence: []string{evil}}
	var out bytes.Buffer
	printJob(&out, j)
	printJobs(&out, []api.Job{j}, true)
	out.WriteString(progressLine(j, 10) + summaryLine(j))
	if s := out.String(); strings.ContainsAny(s, "\x1b\r\x07") {
		t.Fatalf("control characters reached the output: %q", s)
	}
	if !strings.Contains(out.String(), "root ok") {
		t.Fatalf("the text itself was lost: %q", out.String())
	}
}

// The domain list says of each running domain whether it can move, and
// what keeps it here first; a domain the check could not reach is "?".
func TestDomainsSayWhetherEachCanMove(t *testing.T) {
	yes, no := true, false
	doms := []api.Domain{
		{Name: "plain", State: "running", Reason: "booted", Migratable: &yes},
		{Name: "passthrough", State: "running", Reason: "booted", Migratable: &no, BlockedBy: "host_device"},
		{Name: "unreached", State: "running", Reason: "booted", CheckError: "libvirt did not answer"},
		{Name: "off", State: "shutoff", Reason: "shutdown"},
	}
	var out bytes.Buffer
	printDomains(&out, "a", doms, nil, false)
	want := map[string]string{"plain": "yes", "passthrough": "no: host_device", "unreached": "?", "off": "-"}
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[0], "MIGRATABLE") {
		t.Fatalf("no MIGRATABLE column: %q", lines[0])
	}
	col := strings.Index(lines[0], "MIGRATABLE")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if got := strings.TrimSpace(l[col : col+len(want[f[0]])]); got != want[f[0]] {
			t.Errorf("%s: MIGRATABLE %q, want %q\n%s", f[0], got, want[f[0]], out.String())
		}
	}
}

// A hung libvirt is told apart from a down one, with how long it has said
// nothing.
func TestDomainsSayLibvirtIsHung(t *testing.T) {
	sockets := []api.SocketStatus{
		{Socket: "/run/a", Up: true},
		{Socket: "/run/b", LastError: "libvirt ping (/run/b): libvirt did not answer in time", UnresponsiveSince: time.Now().Add(-42 * time.Second)},
		{Socket: "/run/c", LastError: "connection refused"},
	}
	var out bytes.Buffer
	printDomains(&out, "a", nil, sockets, false)
	for _, want := range []string{"/run/a (-) up", "/run/b (-) HUNG: nothing from libvirt for 42s", "/run/c (-) DOWN: connection refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
