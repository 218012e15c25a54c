package libvirtx

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

type result[T any] struct {
	v   T
	err error
}

// call runs fn within the connection's call timeout. go-libvirt cannot
// cancel a call, so on timeout fn keeps running until libvirt answers or the
// socket closes (how long that may be is bounded in unanswered.go). Its
// result therefore comes back only through a channel the abandoned
// goroutine owns: were fn to write variables of its caller, a late answer
// would write them after the caller had returned them.
func call[T any](ctx context.Context, c *Conn, op string, fn func(*libvirt.Libvirt) (T, error)) (T, error) {
	return callWithin(ctx, c, op, c.timeout, fn, nil)
}

// do is call for procedures that return nothing but an error.
func do(ctx context.Context, c *Conn, op string, fn func(*libvirt.Libvirt) error) error {
	_, err := call(ctx, c, op, func(l *libvirt.Libvirt) (struct{}, error) { return struct{}{}, fn(l) })
	return err
}

// callWithin is call with its own timeout. late, when set, is handed what fn
// returns if the caller gave up first, so a result that holds a resource
// (a subscription, a running job) can still be released.
func callWithin[T any](ctx context.Context, c *Conn, op string, timeout time.Duration,
	fn func(*libvirt.Libvirt) (T, error), late func(T, error)) (T, error) {
	var zero T
	if err := c.admit(); err != nil {
		return zero, &CallError{Op: op, Socket: c.socket, Err: err}
	}
	countCall(op)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := make(chan result[T], 1)
	var state atomic.Int32
	go func() {
		v, err := fn(c.l)
		// Only an answer in time says the daemon serves: one that
		// comes past every deadline must not spare it its ping.
		if c.answered(&state) && err == nil {
			c.answeredAt.Store(int64(time.Since(monoEpoch)))
		}
		res <- result[T]{v, err}
	}()
	select {
	case r := <-res:
		return outcome(c, op, r)
	case <-ctx.Done():
	}
	if !c.abandon(&state, op) {
		// Answered as the wait ended: the answer is the caller's, and
		// late, which would not run, is not needed.
		return outcome(c, op, <-res)
	}
	if late != nil {
		go func() {
			r := <-res
			late(r.v, r.err)
		}()
	}
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		err = ErrTimeout
	}
	return zero, &CallError{Op: op, Socket: c.socket, Err: err}
}

// outcome is an answered call's result as its caller gets it.
func outcome[T any](c *Conn, op string, r result[T]) (T, error) {
	if r.err == nil {
		return r.v, nil
	}
	if refused := c.dialer.refusal(); refused != nil {
		// go-libvirt says only that the call was interrupted.
		r.err = refused
	}
	return r.v, &CallError{Op: op, Socket: c.socket, Err: r.err}
}
