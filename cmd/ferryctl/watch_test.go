package main

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/libvirtx"
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

var progressRe = regexp.MustCompile(`\] +(\d+)%  pass (\d+)(: \d+% of \S+ \S+)? `)

// A real 17-pass migration recorded on the test bed, replayed into a real
// ferryd while `ferryctl watch` follows it through a pipe: a line per
// update, the overall percentage never going down, the pass starting over.
func TestWatchOfARecordedMultiPassMigration(t *testing.T) {
	rec, err := migration.LoadRecordedJob("../../migration/testdata/multipass-job.json")
	if err != nil {
		t.Fatal(err)
	}
	sock, tr := ferryd(t)
	d := testDomain(rec.Domain)
	tr.ApplyDomains(jobSocket, []libvirtx.Domain{d}, time.Now())
	tr.ApplyStats(jobSocket, d, rec.Stats(rec.Samples[0]), time.Now())

	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--socket", sock, "watch", rec.Domain}, &out, io.Discard) }()
	lines := func() int { return strings.Count(out.String(), "\n") }
	waitLines := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for lines() < n {
			if time.Now().After(deadline) {
				t.Fatalf("watch printed %d lines, want %d:\n%s", lines(), n, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitLines(2) // the heading and the job as it was
	for i, s := range rec.Samples[1:] {
		tr.ApplyStats(jobSocket, d, rec.Stats(s), time.Now())
		waitLines(3 + i)
	}
	cancel()
	<-done

	prev, prevPass, restarts, seen, figures := -1, 0, 0, 0, 0
	for _, l := range strings.Split(out.String(), "\n") {
		m := progressRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if strings.Contains(l, "\x1b[") {
			t.Fatalf("piped output redraws in place: %q", l)
		}
		seen++
		if m[3] != "" {
			figures++
		}
		overall, _ := strconv.Atoi(m[1])
		pass, _ := strconv.Atoi(m[2])
		if overall < prev {
			t.Fatalf("overall progress went down from %d%% to %d%%:\n%s", prev, overall, out.String())
		}
		if pass > prevPass && prevPass > 0 {
			restarts++
		}
		prev, prevPass = overall, pass
	}
	if seen != len(rec.Samples) || figures < seen-2 || restarts < 10 || prev != 99 {
		t.Fatalf("%d progress lines for %d readings, %d new passes, last at %d%%:\n%s", seen, len(rec.Samples), restarts, prev, out.String())
	}
}
