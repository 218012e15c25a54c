package main

import (
	"encoding/binary"
	"fmt"
)

// With dirty.verify=1 every page the dirtier writes carries its own index
// and generation at its start and a check word at its end, and the guest
// keeps each page's expected generation apart. A scan of all of them then
// finds any page a migration lost, moved, tore or brought back stale: the
// guest's own word that its memory arrived whole.
const (
	verifyMagic = 0x9e3779b97f4a7c15
	trailerAt   = pageSize - 8
)

// checkWord is what a page's last eight bytes hold; never zero for a page
// written, so a page that arrives zeroed fails.
func checkWord(page int, gen uint32) uint64 {
	return (uint64(page)<<32 | uint64(gen)) ^ verifyMagic
}

// stampPage writes page's index, its next generation and the check word.
func (d *dirtier) stampPage(page int) {
	d.gens[page]++
	p := d.mem[page*pageSize : (page+1)*pageSize]
	binary.LittleEndian.PutUint64(p[0:], uint64(page))
	binary.LittleEndian.PutUint32(p[8:], d.gens[page])
	binary.LittleEndian.PutUint64(p[trailerAt:], checkWord(page, d.gens[page]))
}

// verify checks every page, and describes the first that is not as last
// written ("" when all are).
func (d *dirtier) verify() string {
	for i := 0; i < d.pages; i++ {
		p := d.mem[i*pageSize : (i+1)*pageSize]
		idx := binary.LittleEndian.Uint64(p[0:])
		gen := binary.LittleEndian.Uint32(p[8:])
		chk := binary.LittleEndian.Uint64(p[trailerAt:])
		if idx != uint64(i) || gen != d.gens[i] || chk != checkWord(i, d.gens[i]) {
			return fmt.Sprintf("page=%d index=%d gen=%d want_gen=%d check=%#x want_check=%#x", i, idx, gen, d.gens[i], chk, checkWord(i, d.gens[i]))
		}
	}
	return ""
}
