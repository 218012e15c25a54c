package policy

import (
	"testing"
	"time"
)

func TestDrivenDeadline(t *testing.T) {
	cases := []struct {
		mem  uint64
		bw   int
		want time.Duration
	}{
		{0, 0, DrivenDeadlineFloor},
		{1 << 30, 0, DrivenDeadlineFloor}, // 150 s is under the floor
		{8 << 30, 0, 20 * time.Minute},
		{8 << 30, 1000, 20 * time.Minute},                 // the cap is no constraint
		{8 << 30, 8, time.Duration(3*1024) * time.Second}, // three passes at 8 MiB/s
		{512 << 20, 0, DrivenDeadlineFloor},
	}
	for _, c := range cases {
		if got := DrivenDeadline(c.mem, c.bw); got != c.want {
			t.Errorf("DrivenDeadline(%d MiB, %d MiB/s) = %v, want %v", c.mem>>20, c.bw, got, c.want)
		}
	}
}

func TestDeadline(t *testing.T) {
	s := Defaults()
	if got := Deadline(s, 2<<30); got != 300*time.Second {
		t.Errorf("Deadline(2 GiB) = %v, want 300s at 150 s/GiB", got)
	}
	s.CompletionTimeoutPerGiB = 0
	if got := Deadline(s, 2<<30); got != 0 {
		t.Errorf("Deadline with no timeout = %v, want none", got)
	}
}
