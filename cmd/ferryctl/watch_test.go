package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/migration"
)

func TestProgressLineShowsTheRace(t *testing.T) {
	eta := 12.0
	j := migration.Job{Domain: "ns_vm", Role: migration.RoleSource, Mode: migration.ModePreCopy, Iteration: 3,
		ProgressPercent: 50, DataRemainingBytes: 256 << 20, DirtyRateBytesPerSecond: 64 << 20, PassBytes: 113 << 20, PassPercent: 62,
		TransferRateBytesPerSecond: 128 << 20, Convergence: migration.VerdictConverging, EtaSeconds: &eta}
	line := progressLine(j, 10)
	for _, want := range []string{"[#####.....]", " 50%", "pass 3: 62% of 113.0 MiB", "256.0 MiB", "64.0 MiB/s", "128.0 MiB/s", "Converging", "ETA 12s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	end := time.Now()
	j.Phase, j.EndTime, j.StartTime, j.FailureReason = migration.PhaseFailed, &end, end.Add(-3*time.Second), "proxy: memory stream broke"
	if s := summaryLine(j); !strings.Contains(s, "Failed after 3s") || !strings.Contains(s, "reason: proxy: memory stream broke") {
		t.Errorf("summary %q", s)
	}
}
