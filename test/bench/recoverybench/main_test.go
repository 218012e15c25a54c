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
	if !reflect.DeepEqual(o.scenarios, []string{"reset", "cut"}) || o.runs["reset"] != 5 || o.runs["cut"] != 3 || o.cutHold != 45*time.Second {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parseOptions([]string{"--scenarios", "cut, reset", "--runs-cut", "1", "--json", "out.json"})
	if err != nil || !reflect.DeepEqual(o.scenarios, []string{"cut", "reset"}) || o.runs["cut"] != 1 || o.jsonOut != "out.json" {
		t.Errorf("%+v %v", o, err)
	}
	for args, want := range map[string]string{
		"--scenarios reset,flap":               `unknown scenario "flap"`,
		"--scenarios reset,reset":              "named twice",
		"--runs-reset -1":                      "--runs-reset -1",
		"--scenarios cut --runs-cut 0":         "nothing to run",
		"--cut-hold 0s":                        "--cut-hold",
		"--settle -1s":                         "--settle",
		"stray":                                `unexpected argument "stray"`,
		"--runs-reset 0 --scenarios reset,cut": "",
	} {
		_, err := parseOptions(strings.Fields(args))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
