package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The scenarios, in their default order: the unbroken baseline first, so
// the broken ones are read against a baseline of the same bed and hour.
const unbroken = "none"

var scenarioNames = []string{unbroken, "reset", "cut"}

// The routes a broken post-copy is resumed by (ferryd's
// --postcopy-resume, on the source, which the target follows where its
// libvirt can): each broken scenario runs once per route asked.
var routeNames = []string{"libvirt", "monitor"}

type options struct {
	scenarios []string
	routes    []string
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
	routes := fs.String("routes", strings.Join(routeNames, ","), "comma-separated routes each broken scenario is resumed by, in the order run: libvirt (libvirt's own resume protocol, where the target's libvirt can) and monitor (Ferry's QMP monitor of the target QEMU)")
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
	for _, name := range strings.Split(*routes, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(routeNames, name) {
			return o, fmt.Errorf("--routes: unknown route %q (want %s)", name, oneOf(routeNames))
		}
		if slices.Contains(o.routes, name) {
			return o, fmt.Errorf("--routes: %s named twice", name)
		}
		o.routes = append(o.routes, name)
	}
	return o, nil
}

// planned is one scenario as run: the unbroken baseline once, each broken
// one once per route, labelled "reset/libvirt".
type planned struct {
	label, kind, route string
}

// plan is what the bench runs, in order: every scenario on the first
// route, then the broken ones on each next route.
func plan(o options) []planned {
	var out []planned
	for i, route := range o.routes {
		for _, sc := range o.scenarios {
			switch {
			case sc != unbroken:
				out = append(out, planned{sc + "/" + route, sc, route})
			case i == 0:
				out = append(out, planned{sc, sc, route})
			}
		}
	}
	return out
}

func labels(ps []planned) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.label)
	}
	return out
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
	for _, p := range plan(o) {
		parts = append(parts, fmt.Sprintf("%d of %s", o.runs[p.kind], p.label))
	}
	return strings.Join(parts, ", ")
}
