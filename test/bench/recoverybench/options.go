package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// The scenarios, in their default order: the unbroken baseline first, so
// the broken ones are read against a baseline of the same bed and hour.
const unbroken = "none"

var scenarioNames = []string{unbroken, "reset", "cut"}

type options struct {
	scenarios []string
	runs      map[string]int
	cutHold   time.Duration
	settle    time.Duration
	jsonOut   string
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("recoverybench", flag.ContinueOnError)
	scen := fs.String("scenarios", strings.Join(scenarioNames, ","), "comma-separated scenarios, in the order run: none (never broken: the baseline, timed from the moment the others break), reset (every proxy connection reset, the path back at once) and cut (the link down, past the proxy's 30 s TCP user timeout)")
	// Zero here means "as many as reset": the baseline's median is only as
	// steady as the scenario most read against it.
	runsNone := fs.Int("runs-none", 0, "runs of the none scenario, the unbroken baseline (default: as many as --runs-reset)")
	runsReset := fs.Int("runs-reset", 5, "runs of the reset scenario")
	runsCut := fs.Int("runs-cut", 3, "runs of the cut scenario")
	o := options{}
	fs.DurationVar(&o.cutHold, "cut-hold", 45*time.Second, "how long the link stays down, from the cut (the streams break only after the proxy's 30 s TCP user timeout)")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "pause between runs")
	fs.StringVar(&o.jsonOut, "json", "", "also write the settings, every run's figures and the comparisons to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	noneSet := false
	fs.Visit(func(f *flag.Flag) { noneSet = noneSet || f.Name == "runs-none" })
	if !noneSet {
		*runsNone = *runsReset
	}
	o.runs = map[string]int{unbroken: *runsNone, "reset": *runsReset, "cut": *runsCut}
	// none last: unless given, it echoes --runs-reset, which is named then.
	for _, name := range []string{"reset", "cut", unbroken} {
		if n := o.runs[name]; n < 0 {
			return o, fmt.Errorf("--runs-%s %d: want 0 or more", name, n)
		}
	}
	if o.cutHold <= 0 {
		return o, fmt.Errorf("--cut-hold %v: want a positive duration", o.cutHold)
	}
	if o.settle < 0 {
		return o, fmt.Errorf("--settle %v: want 0 or more", o.settle)
	}
	total := 0
	for _, name := range strings.Split(*scen, ",") {
		name = strings.TrimSpace(name)
		if _, ok := o.runs[name]; !ok {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (want %s)", name, oneOf(scenarioNames))
		}
		for _, s := range o.scenarios {
			if s == name {
				return o, fmt.Errorf("--scenarios: %s named twice", name)
			}
		}
		o.scenarios = append(o.scenarios, name)
		total += o.runs[name]
	}
	if total == 0 {
		return o, errors.New("nothing to run: every scenario chosen has 0 runs")
	}
	return o, nil
}

// oneOf is "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func runsText(o options) string {
	var parts []string
	for _, sc := range o.scenarios {
		parts = append(parts, fmt.Sprintf("%d of %s", o.runs[sc], sc))
	}
	return strings.Join(parts, ", ")
}
