package main

import (
	"fmt"
	"io"
	"syscall"
	"time"
)

const pageSize = 4096

type dirtier struct {
	mem   []byte
	pages int
	next  int  // page the next write goes to; wraps so every page is rewritten in turn
	stamp byte // changes every pass so a rewritten page never matches its previous content
	// gens, in verify mode, is each page's generation as last written
	// (see stampPage); nil otherwise.
	gens []uint32
}

func newDirtier(mb int, verify bool) (*dirtier, error) {
	if mb == 0 {
		return &dirtier{}, nil
	}
	// mmap keeps the block outside the Go heap, so the GC never scans or moves it.
	mem, err := syscall.Mmap(-1, 0, mb<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d MiB: %w", mb, err)
	}
	d := &dirtier{mem: mem, pages: len(mem) / pageSize, stamp: 1}
	if verify {
		d.gens = make([]uint32, d.pages)
	}
	return d, nil
}

func (d *dirtier) touchAll() { d.dirty(d.pages) }

// dirty rewrites n pages, one byte each, which is enough for the hypervisor's dirty log.
func (d *dirtier) dirty(n int) {
	for ; n > 0 && d.pages > 0; n-- {
		if d.gens != nil {
			d.stampPage(d.next)
		} else {
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
