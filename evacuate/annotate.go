package evacuate

import (
	"context"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// Bounds on the checks a domain list makes: a few at once, and the list
// answers in a few seconds however many domains a node runs, leaving the
// rest unchecked (CheckError says so).
const (
	listChecksAtOnce = 4
	listChecksFor    = 5 * time.Second
)

// Annotate checks each running domain of a list as `ferryctl check` does
// without a target (but for disk sizes): its live XML, read anew, since a
// hot-plugged device changes the answer. The bound on checks at once is
// the Checker's, whoever asks: a node of 200 domains listed by many
// callers still asks its libvirt a few at a time.
func (c *Checker) Annotate(ctx context.Context, doms []api.Domain) {
	ctx, cancel := context.WithTimeout(ctx, listChecksFor)
	defer cancel()
	sem := c.listChecks
	var wg sync.WaitGroup
	for i := range doms {
		dom := &doms[i]
		if dom.State != running {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			notChecked := "not checked: the list's " + listChecksFor.String() + " for checks ran out"
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				dom.CheckError = notChecked
				return
			}
			if ctx.Err() != nil {
				dom.CheckError = notChecked
				return
			}
			r, _, err := c.inspect(ctx, dom.Socket, dom.Name, true)
			if err != nil {
				dom.CheckError = err.Error()
				return
			}
			dom.Migratable = &r.Migratable
			for _, b := range r.Blockers {
				if b.Severity == api.SeverityBlocks {
					dom.BlockedBy = b.Code
					break
				}
			}
		}()
	}
	wg.Wait()
}
