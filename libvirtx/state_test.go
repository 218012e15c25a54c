package libvirtx

import "testing"

func TestPostCopyStates(t *testing.T) {
	cases := []struct {
		s                State
		reason           int32
		in, onSrc, onDst bool
	}{
		{StatePaused, PausedPostCopy, true, true, false},
		{StatePaused, PausedPostCopyFailed, true, false, false},
		{StateRunning, RunningPostCopy, true, false, true},
		{StateRunning, RunningPostCopyFailed, true, false, false},
		{StatePaused, PausedMigration, false, false, false},
		{StateRunning, RunningMigrated, false, false, false},
		{StateShutoff, ShutoffMigrated, false, false, false},
	}
	for _, c := range cases {
		name := ReasonName(c.s, c.reason)
		if got := InPostCopy(c.s, c.reason); got != c.in {
			t.Errorf("InPostCopy(%s) = %v", name, got)
		}
		if got := PostCopyGoesOn(true, c.s, c.reason); got != c.onSrc {
			t.Errorf("PostCopyGoesOn(source, %s) = %v", name, got)
		}
		if got := PostCopyGoesOn(false, c.s, c.reason); got != c.onDst {
			t.Errorf("PostCopyGoesOn(target, %s) = %v", name, got)
		}
	}
}
