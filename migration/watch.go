package migration

import (
	"context"
	"sort"
	"sync"

	"github.com/ferry-vm/ferry/api"
)

// subscriber coalesces updates per job: a slow reader gets each job's latest
// state rather than a backlog, and never holds the tracker up.
type subscriber struct {
	mu      sync.Mutex
	pending map[jobKey]api.Job
	notify  chan struct{}
}

// Watch streams job updates (without samples, iterations or events) until
// ctx ends. The in-flight jobs are sent first.
func (t *Tracker) Watch(ctx context.Context) <-chan api.Job {
	s := &subscriber{pending: map[jobKey]api.Job{}, notify: make(chan struct{}, 1)}
	out := make(chan api.Job)
	t.mu.Lock()
	for k, j := range t.jobs {
		s.pending[k] = j.view
	}
	t.subs[s] = struct{}{}
	t.mu.Unlock()
	s.notify <- struct{}{}
	go func() {
		defer close(out)
		defer func() {
			t.mu.Lock()
			delete(t.subs, s)
			t.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.notify:
			}
			s.mu.Lock()
			batch := make([]api.Job, 0, len(s.pending))
			for _, j := range s.pending {
				batch = append(batch, j)
			}
			clear(s.pending)
			s.mu.Unlock()
			sort.Slice(batch, func(a, b int) bool { return batch[a].UpdateTime.Before(batch[b].UpdateTime) })
			for _, j := range batch {
				select {
				case out <- j:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// publish hands a job's current view to every watcher; the caller holds t.mu.
func (t *Tracker) publish(j *job) {
	for s := range t.subs {
		s.mu.Lock()
		s.pending[jobKey{j.view.Socket, j.view.Domain}] = j.view
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}
