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
