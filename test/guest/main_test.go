package main

import "testing"

func TestParseCmdline(t *testing.T) {
	for _, c := range []struct {
		cmdline  string
		mb, rate int
		bad      bool
	}{
		{"console=ttyS0 panic=-1 quiet dirty.mb=256 dirty.rate=64", 256, 64, false},
		{"dirty.rate=0 dirty.mb=8", 8, 0, false},
		{"dirty.mb=8 dirty.rate=-1", 8, -1, false},
		{"quiet", 0, -1, false},
		{"dirty.mb=x", 0, 0, true},
		{"dirty.rate=-2", 0, 0, true},
	} {
		mb, rate, err := parseCmdline(c.cmdline)
		if (err != nil) != c.bad || (!c.bad && (mb != c.mb || rate != c.rate)) {
			t.Errorf("parseCmdline(%q) = %d, %d, %v", c.cmdline, mb, rate, err)
		}
	}
}

func TestDirtyWrapsAndChangesContent(t *testing.T) {
	d, err := newDirtier(1)
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
