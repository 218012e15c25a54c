package drive

import (
	"testing"
	"time"
)

func TestATrialHoldsUntilItsEndAndTheGracePass(t *testing.T) {
	ts := NewTrials()
	ts.grace = 500 * time.Millisecond // long beside the check right after end
	end := ts.Hold("/s", "vm")
	if !ts.Holds("/s", "vm") || ts.Holds("/other", "vm") {
		t.Fatal("held on the wrong socket, or not at all")
	}
	end()
	end() // once only
	if !ts.Holds("/s", "vm") {
		t.Fatal("let go before the grace")
	}
	waitFor(t, "the hold to end", func() bool { return !ts.Holds("/s", "vm") })
}

// End lets go at once; an end that comes later must not end a hold that
// began after, even once the domain was let go entirely.
func TestAnEndAfterEndTouchesNoLaterHold(t *testing.T) {
	ts := NewTrials()
	ts.grace = 20 * time.Millisecond
	stale := ts.Hold("/s", "vm")
	ts.End("/s", "vm")
	if ts.Holds("/s", "vm") {
		t.Fatal("End did not let go")
	}
	later := ts.Hold("/s", "vm")
	stale()
	time.Sleep(5 * ts.grace)
	if !ts.Holds("/s", "vm") {
		t.Fatal("an ended hold's end let go of a later one")
	}
	later()
	waitFor(t, "the later hold to end", func() bool { return !ts.Holds("/s", "vm") })
}

func TestTwoHoldsHoldUntilBothEnd(t *testing.T) {
	ts := NewTrials()
	ts.grace = 10 * time.Millisecond
	a, b := ts.Hold("/s", "vm"), ts.Hold("/s", "vm")
	a()
	time.Sleep(5 * ts.grace)
	if !ts.Holds("/s", "vm") {
		t.Fatal("one of two holds ended and the domain was let go")
	}
	b()
	waitFor(t, "both holds to end", func() bool { return !ts.Holds("/s", "vm") })
}

// A nil Trials holds nothing, as the tracker's nil Config.Trials does.
func TestANilTrialsHoldsNothing(t *testing.T) {
	var ts *Trials
	ts.Hold("/s", "vm")()
	ts.End("/s", "vm")
	if ts.Holds("/s", "vm") {
		t.Fatal("a nil Trials held a domain")
	}
}
