package main

import (
	"testing"
)

func TestTotalCellCountsCompletedRuns(t *testing.T) {
	done := func(s float64) result { return result{Complete: true, TotalSeconds: s} }
	failed := result{TotalSeconds: 76}
	for _, c := range []struct {
		rs   []result
		want string
	}{
		{nil, ""},
		{[]result{failed}, "- (0/1)"},
		{[]result{done(18.1)}, "18.1"},
		{[]result{done(18), failed, done(20)}, "19.0 (18.0-20.0), 2/3 completed"},
	} {
		if got := totalCell(c.rs); got != c.want {
			t.Errorf("%+v: %q, want %q", c.rs, got, c.want)
		}
	}
}

func TestMedianRunPicksTheMiddleCompletedRun(t *testing.T) {
	rs := []result{
		{Run: 1, Complete: true, TotalSeconds: 30},
		{Run: 2, TotalSeconds: 5},
		{Run: 3, Complete: true, TotalSeconds: 10},
		{Run: 4, Complete: true, TotalSeconds: 20},
	}
	if m, _ := medianRun(rs); m.Run != 4 {
		t.Errorf("median run %d, want 4 (20 s of 10, 20, 30)", m.Run)
	}
	if m, _ := medianRun(rs[1:2]); m.Run != 2 {
		t.Errorf("with no completion: run %d, want the failed one", m.Run)
	}
}

func TestTurnInterleavesPoliciesAndRunsOnceOnlyFirst(t *testing.T) {
	kinds := []policyKind{policies["none"], policies["kubevirt-legacy"], policies["ferry"], policies["ferry-no-postcopy"]}
	once := map[string]bool{"none": true, "ferry-no-postcopy": true}
	names := func(ks []policyKind) (s string) {
		for _, k := range ks {
			s += k.Name + " "
		}
		return s
	}
	for _, c := range []struct {
		run, i int
		want   string
	}{
		{1, 0, "none kubevirt-legacy ferry ferry-no-postcopy "},
		{1, 1, "kubevirt-legacy ferry ferry-no-postcopy none "},
		{2, 0, "ferry kubevirt-legacy "},
		{2, 1, "kubevirt-legacy ferry "},
		{3, 0, "kubevirt-legacy ferry "},
	} {
		if got := names(turn(kinds, once, c.run, c.i)); got != c.want {
			t.Errorf("run %d case %d: %q, want %q", c.run, c.i, got, c.want)
		}
	}
}

func TestOutcomeTextCountsWhenRunsDisagree(t *testing.T) {
	same := []result{{Outcome: "post-copy"}, {Outcome: "post-copy"}}
	if got := outcomeText(same); got != "post-copy" {
		t.Errorf("%q", got)
	}
	mixed := []result{{Outcome: "pre-copy"}, {Outcome: "post-copy"}, {Outcome: "pre-copy"}}
	if got := outcomeText(mixed); got != "pre-copy x2, post-copy x1" {
		t.Errorf("%q", got)
	}
}
