package drive

import (
	"context"
	"fmt"
	"sync"
)

// slots bounds the migrations this node drives out at once: a request
// past the bound waits, first come first served, for one to end.
type slots struct {
	mu    sync.Mutex
	max   int
	used  int
	queue []chan struct{}
}

func newSlots(n int) *slots {
	if n <= 0 {
		n = DefaultOutboundSlots
	}
	return &slots{max: n}
}

// DefaultOutboundSlots and DefaultInboundSlots: two migrations at a time
// each way, KubeVirt's parallelOutboundMigrationsPerNode; the link is not
// split evenly between them (see balance).
const (
	DefaultOutboundSlots = 2
	DefaultInboundSlots  = 2
)

// acquire takes a slot, waiting behind those queued before; waiting is
// told, once, how many are ahead.
func (s *slots) acquire(ctx context.Context, waiting func(ahead int)) (release func(), err error) {
	s.mu.Lock()
	if s.used < s.max && len(s.queue) == 0 {
		s.used++
		s.mu.Unlock()
		return s.releaser(), nil
	}
	turn := make(chan struct{})
	s.queue = append(s.queue, turn)
	ahead := len(s.queue) - 1 + s.used
	s.mu.Unlock()
	if waiting != nil {
		waiting(ahead)
	}
	select {
	case <-turn:
		return s.releaser(), nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, q := range s.queue {
			if q == turn {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				return nil, fmt.Errorf("%w: waited for one of the %d outbound migration slots, all busy: %v", ErrConflict, s.max, ctx.Err())
			}
		}
		// Given the slot as the wait ended: handed on.
		s.handOn()
		return nil, fmt.Errorf("%w: waited for one of the %d outbound migration slots, all busy: %v", ErrConflict, s.max, ctx.Err())
	}
}

func (s *slots) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.handOn()
		})
	}
}

// handOn gives a freed slot to the first in the queue, or frees it.
func (s *slots) handOn() {
	if len(s.queue) > 0 {
		close(s.queue[0])
		s.queue = s.queue[1:]
		return
	}
	s.used--
}

// SlotStatus is the node's outbound slots: in use, their number and the
// requests waiting for one; Hung counts the migrations that wait on a
// libvirtd that does not answer (their slot stays theirs: libvirt may yet
// go on).
type SlotStatus struct{ Used, Max, Queued, Hung int }

func (s *slots) status() SlotStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SlotStatus{Used: s.used, Max: s.max, Queued: len(s.queue)}
}

// SlotStatus is the node's outbound slots now.
func (s *Source) SlotStatus() SlotStatus {
	st := s.slots.status()
	st.Hung = s.running.hungCount()
	return st
}
