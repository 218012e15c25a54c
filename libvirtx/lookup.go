package libvirtx

import (
	"sync"
	"time"
)

// Looking at another guest's files touches the filesystems they live on,
// and one of them may hang (a hard NFS mount whose server is gone): a
// lookup stuck there must not hold every incoming migration's Prepare. So
// each check waits for a lookup lookupWait at most, then goes on without
// it (a path is then compared as it is spelt), and a path is never looked
// up twice at once: what is stuck is one goroutine per stuck path.
const lookupWait = 2 * time.Second

type pendingLookup[T any] struct {
	done chan struct{}
	v    T
}

// lookupWithin is f's answer for key, or fallback if it takes longer than
// lookupWait; in-flight lookups are shared through m.
func lookupWithin[T any](m *sync.Map, key string, f func() T, fallback T) T {
	l := &pendingLookup[T]{done: make(chan struct{})}
	if v, loaded := m.LoadOrStore(key, l); loaded {
		l = v.(*pendingLookup[T])
	} else {
		go func() {
			l.v = f()
			close(l.done)
			m.Delete(key)
		}()
	}
	t := time.NewTimer(lookupWait)
	defer t.Stop()
	select {
	case <-l.done:
		return l.v
	case <-t.C:
		return fallback
	}
}

var (
	fileLookups  sync.Map // path -> *pendingLookup[fileKeys]
	chainLookups sync.Map // path -> *pendingLookup[[]string]
)
