package daemon

import (
	"strings"
	"sync"
	"time"
)

// drives tracks the migrations this ferryd is driving, keyed by socket
// NUL domain, and carries an operator's decision to the one in doubt.
type drives struct {
	mu      sync.Mutex
	running map[string]*driveState
}

type driveState struct {
	done chan struct{} // closed when the drive ends
	// decide carries an operator's "keep source" or "keep target"
	// (proxy.OutcomeStopped or OutcomeRunning), taken only in doubt.
	decide  chan string
	inDoubt bool
}

func newDrives() *drives { return &drives{running: map[string]*driveState{}} }

func driveKey(socket, domain string) string { return socket + "\x00" + domain }

func (ds *drives) start(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if _, busy := ds.running[key]; busy {
		return false
	}
	ds.running[key] = &driveState{done: make(chan struct{}), decide: make(chan string, 1)}
	return true
}

func (ds *drives) end(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		close(st.done)
		delete(ds.running, key)
	}
}

// decisions is the channel an operator's decision for key arrives on;
// nil (never ready) for a key not driven.
func (ds *drives) decisions(key string) <-chan string {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		return st.decide
	}
	return nil
}

// doubt marks key's migration in doubt: from now an operator may decide it.
func (ds *drives) doubt(key string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st, ok := ds.running[key]; ok {
		st.inDoubt = true
	}
}

// decide hands an operator's decision to the migration of domain in doubt
// (on socket, if named), and returns its key; false when none is.
func (ds *drives) decide(socket, domain, outcome string) (string, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var found *driveState
	var key string
	for k, st := range ds.running {
		s, d, _ := strings.Cut(k, "\x00")
		if d != domain || (socket != "" && s != socket) || !st.inDoubt {
			continue
		}
		if found != nil {
			return "", false // two sockets: the operator must name one
		}
		found, key = st, k
	}
	if found == nil {
		return "", false
	}
	select {
	case found.decide <- outcome:
	default: // a decision is already on its way
	}
	return key, true
}

// stopAll gives running migrations a grace period to finish before ferryd
// stops relaying them: cutting the proxy would fail them.
func (ds *drives) stopAll() {
	ds.mu.Lock()
	waits := make([]chan struct{}, 0, len(ds.running))
	for _, st := range ds.running {
		waits = append(waits, st.done)
	}
	ds.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for _, w := range waits {
		select {
		case <-w:
		case <-deadline:
			return
		}
	}
}
