package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The baseline first, as many runs as reset.
	if !reflect.DeepEqual(o.scenarios, []string{"none", "reset", "cut"}) || o.runs["none"] != 5 || o.runs["reset"] != 5 || o.runs["cut"] != 3 || o.cutHold != 45*time.Second {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parseOptions([]string{"--scenarios", "cut, reset", "--runs-cut", "1", "--json", "out.json"})
	if err != nil || !reflect.DeepEqual(o.scenarios, []string{"cut", "reset"}) || o.runs["cut"] != 1 || o.jsonOut != "out.json" {
		t.Errorf("%+v %v", o, err)
	}
	for args, want := range map[string]int{
		"--runs-reset 3":                       3,
		"--runs-reset 3 --runs-none 2":         2,
		"--runs-none 7":                        7,
		"--runs-none 0 --scenarios none,reset": 0,
	} {
		o, err := parseOptions(strings.Fields(args))
		if err != nil || o.runs["none"] != want {
			t.Errorf("%s: %d runs of none (%v), want %d", args, o.runs["none"], err, want)
		}
	}
	for args, want := range map[string]string{
		"--scenarios reset,flap":               `unknown scenario "flap" (want none, reset or cut)`,
		"--scenarios reset,reset":              "named twice",
		"--scenarios none,reset,none":          "none named twice",
		"--runs-reset -1":                      "--runs-reset -1",
		"--runs-none -2":                       "--runs-none -2",
		"--scenarios cut --runs-cut 0":         "nothing to run",
		"--scenarios none --runs-reset 0":      "nothing to run",
		"--cut-hold 0s":                        "--cut-hold",
		"--settle -1s":                         "--settle",
		"stray":                                `unexpected argument "stray"`,
		"--runs-reset 0 --scenarios reset,cut": "",
		"--scenarios none":                     "",
	} {
		_, err := parseOptions(strings.Fields(args))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// The baseline runs once; each broken scenario once per route, the
// routes in the order asked, and a route is named once.
func TestPlanRunsEachBrokenScenarioOnEachRoute(t *testing.T) {
	o, err := parseOptions([]string{"--scenarios", "none,reset,cut", "--routes", "monitor,libvirt"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"none", "reset/monitor", "cut/monitor", "reset/libvirt", "cut/libvirt"}
	if got := labels(plan(o)); !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	if o, _ := parseOptions(nil); !reflect.DeepEqual(o.routes, []string{"libvirt", "monitor"}) {
		t.Errorf("default routes %v, want both, libvirt's first", o.routes)
	}
	for args, want := range map[string]string{
		"--routes qmp":             `unknown route "qmp" (want libvirt or monitor)`,
		"--routes libvirt,libvirt": "libvirt named twice",
	} {
		if _, err := parseOptions(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
