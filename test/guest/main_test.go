package main

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	for _, c := range []struct {
		cmdline string
		want    config
		bad     bool
	}{
		{"console=ttyS0 panic=-1 quiet dirty.mb=256 dirty.rate=64", config{256, 64, false, fillStamp}, false},
		{"dirty.rate=0 dirty.mb=8 dirty.verify=1", config{8, 0, true, fillStamp}, false},
		{"dirty.mb=8 dirty.rate=-1 dirty.fill=zero", config{8, -1, false, fillZero}, false},
		{"dirty.fill=random", config{0, -1, false, fillRandom}, false},
		{"quiet", config{0, -1, false, fillStamp}, false},
		{"dirty.mb=x", config{}, true},
		{"dirty.rate=-2", config{}, true},
		{"dirty.fill=ones", config{}, true},
		{"dirty.verify=1 dirty.fill=zero", config{}, true},
	} {
		got, err := parseCmdline(c.cmdline)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("parseCmdline(%q) = %+v, %v", c.cmdline, got, err)
		}
	}
}

func TestDirtyWrapsAndChangesContent(t *testing.T) {
	d, err := newDirtier(1, false, fillStamp)
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
		d, err := newDirtier(1, true, fillStamp)
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

func TestFillsWriteWhatTheyPromise(t *testing.T) {
	zero, err := newDirtier(1, false, fillZero)
	if err != nil {
		t.Fatal(err)
	}
	// As a stamped page would be: the byte a write goes to is not zero.
	for p := 0; p < zero.pages; p++ {
		zero.mem[p*pageSize] = 0xff
	}
	zero.dirty(zero.pages)
	for i, b := range zero.mem {
		if b != 0 {
			t.Fatalf("byte %d of a zero-filled block is %d: the page is no zero page", i, b)
		}
	}
	rnd, err := newDirtier(1, false, fillRandom)
	if err != nil {
		t.Fatal(err)
	}
	rnd.touchAll()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(rnd.mem)
	w.Close()
	if buf.Len() < len(rnd.mem)*99/100 {
		t.Errorf("random pages compress to %d of %d bytes", buf.Len(), len(rnd.mem))
	}
}
