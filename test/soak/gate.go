package main

import (
	"context"
	"sync"
)

// gate lets the migrators start migrations while it is open. Closed, the
// migrations in flight run to their end and no new one starts, so that
// after a fault the bed comes to rest and can be checked.
type gate struct {
	mu   sync.Mutex
	open bool
	// busy counts the migrators between the gate and the end of their
	// migration's own check.
	busy int
	// opened is closed when the gate opens, and replaced when it closes.
	opened chan struct{}
}

func newGate() *gate { return &gate{opened: make(chan struct{})} }

// enter waits for the gate to be open and counts the caller busy; it
// leaves with leave.
func (g *gate) enter(ctx context.Context) error {
	for {
		g.mu.Lock()
		if g.open {
			g.busy++
			g.mu.Unlock()
			return nil
		}
		ch := g.opened
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *gate) leave() {
	g.mu.Lock()
	g.busy--
	g.mu.Unlock()
}

func (g *gate) setOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if open == g.open {
		return
	}
	g.open = open
	if open {
		close(g.opened)
	} else {
		g.opened = make(chan struct{})
	}
}

// idle says the gate is closed and no migration is under way.
func (g *gate) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.open && g.busy == 0
}
