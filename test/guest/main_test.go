package main

import (
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	for _, c := range []struct {
		cmdline  string
		mb, rate int
		verify   bool
		bad      bool
	}{
		{"console=ttyS0 panic=-1 quiet dirty.mb=256 dirty.rate=64", 256, 64, false, false},
		{"dirty.rate=0 dirty.mb=8 dirty.verify=1", 8, 0, true, false},
		{"dirty.mb=8 dirty.rate=-1", 8, -1, false, false},
		{"quiet", 0, -1, false, false},
		{"dirty.mb=x", 0, 0, false, true},
		{"dirty.rate=-2", 0, 0, false, true},
	} {
		mb, rate, verify, err := parseCmdline(c.cmdline)
		if (err != nil) != c.bad || (!c.bad && (mb != c.mb || rate != c.rate || verify != c.verify)) {
			t.Errorf("parseCmdline(%q) = %d, %d, %v, %v", c.cmdline, mb, rate, verify, err)
		}
	}
}

func TestDirtyWrapsAndChangesContent(t *testing.T) {
	d, err := newDirtier(1, false)
	if err != nil {
		t.Fatal(err)
	}
	d.touchAll()
	first := d.mem[0]
	d.dirty(1)
	if d.mem[0] == first {
		t.Error("second pass wrote the same byte; the page would not change")
	}
}

// Each way a migration could get a page wrong is found, naming the page.
func TestVerifyFindsEveryKindOfBadPage(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(d *dirtier)
	}{
		{"zeroed", func(d *dirtier) { clear(d.mem[3*pageSize : 4*pageSize]) }},
		{"moved", func(d *dirtier) { copy(d.mem[3*pageSize:4*pageSize], d.mem[5*pageSize:6*pageSize]) }},
		{"torn", func(d *dirtier) { d.mem[3*pageSize+trailerAt] ^= 1 }},
		{"stale", func(d *dirtier) {
			old := append([]byte(nil), d.mem[3*pageSize:4*pageSize]...)
			d.stampPage(3)
			copy(d.mem[3*pageSize:4*pageSize], old)
		}},
	} {
		d, err := newDirtier(1, true)
		if err != nil {
			t.Fatal(err)
		}
		d.touchAll()
		d.dirty(d.pages + 7) // a second pass, part of a third
		if bad := d.verify(); bad != "" {
			t.Fatalf("fresh memory reported bad: %s", bad)
		}
		c.spoil(d)
		if bad := d.verify(); !strings.HasPrefix(bad, "page=3 ") {
			t.Errorf("%s page: verify said %q, want page 3", c.name, bad)
		}
	}
}
