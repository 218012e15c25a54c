package migration

// ring keeps the last n values appended; old evidence gives way to new so a
// job that runs for hours cannot grow without bound. It grows as values
// come: most jobs keep far fewer than n, and a job costs nothing up front.
type ring[T any] struct {
	buf          []T
	start, limit int
}

func newRing[T any](capacity int) ring[T] {
	return ring[T]{limit: max(capacity, 1)}
}

// push appends v and returns the value it evicted (the zero value if none).
func (r *ring[T]) push(v T) (evicted T) {
	if len(r.buf) < r.limit {
		if len(r.buf) == cap(r.buf) {
			// Grown as values come, never past the limit.
			grown := make([]T, len(r.buf), min(max(2*cap(r.buf), 8), r.limit))
			copy(grown, r.buf)
			r.buf = grown
		}
		r.buf = append(r.buf, v)
		return evicted
	}
	evicted = r.buf[r.start]
	r.buf[r.start] = v
	r.start = (r.start + 1) % len(r.buf)
	return evicted
}

func (r *ring[T]) len() int { return len(r.buf) }

// last returns a pointer to the newest value, or nil when empty.
func (r *ring[T]) last() *T {
	if len(r.buf) == 0 {
		return nil
	}
	i := (r.start + len(r.buf) - 1) % len(r.buf)
	return &r.buf[i]
}

// slice copies the values oldest first.
func (r *ring[T]) slice() []T {
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.start:]...)
	return append(out, r.buf[:r.start]...)
}
