package main

import (
	"strings"
	"testing"
)

func TestReportPutsTheWaysSideBySide(t *testing.T) {
	evs := []evacuation{
		{Way: wayKubeVirt, Seconds: 100, Guests: []moved{{Phase: "Completed", PostCopy: true, DowntimeMs: 40, MemoryOK: true}, {Phase: "Failed", DowntimeMs: 900, MemoryOK: true}}},
		{Way: wayFerry, Seconds: 60, Guests: []moved{{Phase: "Completed", DowntimeMs: 200, MemoryOK: true}, {Phase: "Completed", DowntimeMs: 250, MemoryOK: false}}},
	}
	r := report(evs)
	for _, want := range []string{"| kubevirt-defaults | 1 | 100.0 s | 1.00 | 900 ms | 1 | 1 | 0 |", "| ferry | 1 | 60.0 s | 0.60 | 250 ms | 0 | 0 | 1 |", ": met"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
	evs[1].Seconds = 80
	if r := report(evs); !strings.Contains(r, "NOT met") {
		t.Errorf("0.8× is reported met:\n%s", r)
	}
}
