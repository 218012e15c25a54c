package main

import (
	"fmt"
	"strings"

	"github.com/ferry-vm/ferry/test/testbed"
)

// guests are two guests that converge only with most of the link, and two
// easy ones: what splitting the link evenly costs is what the hard two
// show.
var guests = []testbed.GuestSpec{
	{Name: "evb-hard1", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 40, Verify: true},
	{Name: "evb-easy1", MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 4, Verify: true},
	{Name: "evb-hard2", MemoryMiB: 512, DirtyMiB: 384, DirtyRateMiBs: 40, Verify: true},
	{Name: "evb-easy2", MemoryMiB: 256, DirtyMiB: 128, DirtyRateMiBs: 4, Verify: true},
}

func describe(gs []testbed.GuestSpec) string {
	var s []string
	for _, g := range gs {
		s = append(s, fmt.Sprintf("%s %d MiB dirtying %d MiB at %d MiB/s", g.Name, g.MemoryMiB, g.DirtyMiB, g.DirtyRateMiBs))
	}
	return strings.Join(s, "; ")
}
