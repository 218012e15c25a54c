package main

import (
	"testing"
	"time"
)

func TestCountConsoleCountsCompleteDirtierLines(t *testing.T) {
	text := "DIRTIER: touched 384 MiB in 2.10s, target 4 MiB/s READY\r\n" +
		"DIRTIER: t=1s rate=4.0 MiB/s total=4 MiB\r\n" +
		"DIRTIER: verify=ok pages=98304\r\n" +
		"[    3.2] some kernel line\n" +
		"DIRTIER: t=2s rate=4.0 MiB/s total=8 MiB\n" +
		"DIRTIER: verify=BAD page=7 index=7 gen=2 want_gen=3\n" +
		"DIRTIER: verify=BAD page=9\n" +
		"DIRTIER: t=3s rate=4.0 MiB/s tot" // still being written
	got := countConsole(text)
	want := consoleCounts{Progress: 5, OK: 1, Bad: "DIRTIER: verify=BAD page=7 index=7 gen=2 want_gen=3"}
	if got != want {
		t.Errorf("countConsole = %+v, want %+v", got, want)
	}
	if got := countConsole("DIRTIER: t=1s rate=4.0 MiB/s total=4 MiB"); got != (consoleCounts{}) {
		t.Errorf("a console without a complete line: %+v, want nothing counted", got)
	}
}

func TestSampleAtAndFirstGrowth(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ss := []consoleSample{
		{at(0), consoleCounts{Progress: 10, OK: 5}},
		{at(900), consoleCounts{Progress: 11, OK: 5}},
		{at(4000), consoleCounts{Progress: 12, OK: 6}},
		{at(4950), consoleCounts{Progress: 13, OK: 6}},
	}
	if _, ok := sampleAt(ss, at(-1)); ok {
		t.Error("sampleAt before the first reading found one")
	}
	base, ok := sampleAt(ss, at(1000))
	if !ok || base.Progress != 11 {
		t.Fatalf("sampleAt(1000 ms) = %+v %v, want the reading of 900 ms", base, ok)
	}
	if s, ok := sampleAt(ss, at(900)); !ok || s.Progress != 11 {
		t.Errorf("sampleAt(900 ms) = %+v %v, want the reading taken at that instant", s, ok)
	}
	g, ok := firstGrowth(ss, at(1000), base.consoleCounts)
	if !ok || !g.At.Equal(at(4000)) {
		t.Errorf("firstGrowth = %+v %v, want the reading of 4000 ms", g, ok)
	}
	if _, ok := firstGrowth(ss, at(5000), consoleCounts{Progress: 13}); ok {
		t.Error("firstGrowth found a line though none came after")
	}
}
