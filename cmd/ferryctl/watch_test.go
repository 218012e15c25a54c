package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/migration"
	"github.com/ferry-vm/ferry/migration/migrationtest"
)

func TestProgressLineShowsTheRace(t *testing.T) {
	eta := 12.0
	j := api.Job{Domain: "ns_vm", Role: api.RoleSource, Mode: api.ModePreCopy, Iteration: 3,
		ProgressPercent: 50, DataRemainingBytes: 256 << 20, DirtyRateBytesPerSecond: 64 << 20, PassBytes: 113 << 20, PassPercent: 62,
		TransferRateBytesPerSecond: 128 << 20, Convergence: api.VerdictConverging, EtaSeconds: &eta}
	line := progressLine(j, 10)
	for _, want := range []string{"[#####.....]", " 50%", "pass 3: 62% of 113.0 MiB", "256.0 MiB", "64.0 MiB/s", "128.0 MiB/s", "Converging", "ETA 12s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	end := time.Now()
	j.Phase, j.EndTime, j.StartTime, j.FailureReason = api.PhaseFailed, &end, end.Add(-3*time.Second), "proxy: memory stream broke"
	if s := summaryLine(j); !strings.Contains(s, "Failed after 3s") || !strings.Contains(s, "reason: proxy: memory stream broke") {
		t.Errorf("summary %q", s)
	}
}

var progressRe = regexp.MustCompile(`\] +(\d+)%  pass (\d+)(: \d+% of \S+ \S+)? `)

// A real 17-pass migration recorded on the test bed, served reading by
// reading by a fake libvirt to a real ferryd while `ferryctl watch`
// follows it through a pipe: each reading's line in turn (ferryd's
// sampler reads an unchanged reading again, and its line comes again),
// the overall percentage never going down, the pass starting over.
func TestWatchOfARecordedMultiPassMigration(t *testing.T) {
	rec, err := migration.LoadRecordedJob("../../migration/testdata/multipass-job.json")
	if err != nil {
		t.Fatal(err)
	}
	sock, tr, lv := ferryd(t)
	lv.SetDomain(testDomain(rec.Domain))
	// read serves a reading and returns the line watch prints for it, from
	// the job as ferryd shows it then.
	read := func(s api.Sample) string {
		t.Helper()
		lv.SetJob(rec.Domain, rec.Stats(s))
		j := migrationtest.WaitJob(t, tr, lv.Path(), rec.Domain, fmt.Sprintf("at %d ms", s.ElapsedMs), func(j api.Job) bool { return j.ElapsedMs == s.ElapsedMs })
		return progressLine(j, 30)
	}
	want := []string{read(rec.Samples[0])}

	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"--socket", sock, "watch", rec.Domain}, &out, io.Discard) }()
	printed := func(line string) {
		t.Helper()
		migrationtest.Wait(t, "watch to print "+line, func() bool {
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			return lines[len(lines)-1] == line
		})
	}
	printed(want[0])
	for _, s := range rec.Samples[1:] {
		want = append(want, read(s))
		printed(want[len(want)-1])
	}
	cancel()
	<-done

	var lines []string
	prev, prevPass, restarts, figures := -1, 0, 0, 0
	for _, l := range strings.Split(out.String(), "\n") {
		m := progressRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if strings.Contains(l, "\x1b[") {
			t.Fatalf("piped output redraws in place: %q", l)
		}
		lines = append(lines, l)
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
	got, readings := slices.Compact(slices.Clone(lines)), slices.Compact(slices.Clone(want))
	if !slices.Equal(got, readings) {
		t.Fatalf("watch printed, repeats folded:\n%s\nthe readings' lines:\n%s", strings.Join(got, "\n"), strings.Join(readings, "\n"))
	}
	if len(readings) < len(rec.Samples)-2 || figures < len(lines)-2 || restarts < 10 || prev != 99 {
		t.Fatalf("%d distinct lines for %d readings, %d of %d with a pass's figures, %d new passes, last at %d%%:\n%s",
			len(readings), len(rec.Samples), figures, len(lines), restarts, prev, out.String())
	}
}
