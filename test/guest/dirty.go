package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"syscall"
	"time"
)

const pageSize = 4096

// fill is what a write puts in a page.
type fill string

const (
	// fillStamp writes one byte that changes every pass: a page that is
	// never zero and compresses to almost nothing.
	fillStamp fill = "stamp"
	// fillZero writes a zero byte: the page is dirty, and still a zero
	// page, which QEMU scans and sends as a few bytes.
	fillZero fill = "zero"
	// fillRandom fills the whole page with fresh pseudo-random bytes,
	// which no compression shrinks.
	fillRandom fill = "random"
)

type dirtier struct {
	mem   []byte
	pages int
	next  int  // page the next write goes to; wraps so every page is rewritten in turn
	stamp byte // changes every pass so a rewritten page never matches its previous content
	// gens, in verify mode, is each page's generation as last written
	// (see stampPage); nil otherwise.
	gens []uint32
	fill fill
	rnd  uint64 // xorshift state for fillRandom
}

func newDirtier(mb int, verify bool, f fill) (*dirtier, error) {
	if mb == 0 {
		return &dirtier{fill: f}, nil
	}
	// mmap keeps the block outside the Go heap, so the GC never scans or moves it.
	mem, err := syscall.Mmap(-1, 0, mb<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d MiB: %w", mb, err)
	}
	d := &dirtier{mem: mem, pages: len(mem) / pageSize, stamp: 1, fill: f, rnd: uint64(time.Now().UnixNano()) | 1}
	if verify {
		d.gens = make([]uint32, d.pages)
	}
	return d, nil
}

func (d *dirtier) touchAll() { d.dirty(d.pages) }

// dirty rewrites n pages: one byte each, which is enough for the
// hypervisor's dirty log, or the whole page for fillRandom.
func (d *dirtier) dirty(n int) {
	for ; n > 0 && d.pages > 0; n-- {
		switch {
		case d.gens != nil:
			d.stampPage(d.next)
		case d.fill == fillZero:
			d.mem[d.next*pageSize] = 0
		case d.fill == fillRandom:
			d.randomPage(d.next)
		default:
			d.mem[d.next*pageSize] = d.stamp
		}
		d.next++
		if d.next == d.pages {
			d.next = 0
			d.stamp++
			if d.stamp == 0 {
				d.stamp = 1
			}
		}
	}
}

// run dirties at rate MiB/s forever and reports the achieved rate once a second.
func (d *dirtier) run(out io.Writer, rate int) {
	const pagesPerMiB = (1 << 20) / pageSize
	const burst = 256 // pages between clock reads at max rate; keeps time.Now off the hot path
	start := time.Now()
	lastReport, lastTotal := start, int64(0)
	var total int64   // pages dirtied since READY
	var skipped int64 // pages forgiven after stalls, so the schedule is not chased
	for {
		now := time.Now()
		if now.Sub(lastReport) >= time.Second {
			mib := float64(total-lastTotal) / pagesPerMiB
			fmt.Fprintf(out, "DIRTIER: t=%ds rate=%.1f MiB/s total=%d MiB\n",
				int(now.Sub(start).Seconds()), mib/now.Sub(lastReport).Seconds(), total/pagesPerMiB)
			if d.gens != nil {
				if bad := d.verify(); bad != "" {
					fmt.Fprintf(out, "DIRTIER: verify=BAD %s\n", bad)
				} else {
					fmt.Fprintf(out, "DIRTIER: verify=ok pages=%d\n", d.pages)
				}
			}
			lastReport, lastTotal = now, total
		}
		switch {
		case d.pages == 0 || rate < 0:
			time.Sleep(time.Until(lastReport.Add(time.Second)))
		case rate == 0:
			d.dirty(burst)
			total += burst
		default:
			due := int64(now.Sub(start).Seconds()*float64(rate*pagesPerMiB)) - total - skipped
			if due <= 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			// A long stall (e.g. the vCPU paused for migration) must not turn into a catch-up storm.
			if limit := int64(rate * pagesPerMiB / 10); due > limit {
				skipped += due - limit
				due = limit
			}
			d.dirty(int(due))
			total += due
		}
	}
}

// randomPage fills page i with xorshift64 output.
func (d *dirtier) randomPage(i int) {
	p := d.mem[i*pageSize : (i+1)*pageSize]
	for off := 0; off < pageSize; off += 8 {
		d.rnd ^= d.rnd << 13
		d.rnd ^= d.rnd >> 7
		d.rnd ^= d.rnd << 17
		binary.LittleEndian.PutUint64(p[off:], d.rnd)
	}
}
