package libvirtx

import (
	"context"
	"fmt"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// EventKind says which libvirt event an Event carries.
type EventKind string

const (
	KindLifecycle EventKind = "lifecycle"
	KindIteration EventKind = "migration-iteration"
)

// Event is a libvirt domain event, stamped with the time Ferry received it
// (libvirt's events carry no timestamp of their own).
type Event struct {
	Kind      EventKind
	Socket    string
	Domain    libvirt.Domain
	Event     int32 // lifecycle only
	Detail    int32 // lifecycle only
	Iteration int32 // migration-iteration only
	Time      time.Time
}

func (e Event) String() string {
	if e.Kind == KindIteration {
		return fmt.Sprintf("migration-iteration %d", e.Iteration)
	}
	return "lifecycle " + EventName(e.Event, e.Detail)
}

// Subscribe delivers lifecycle and migration-iteration events of every
// domain on this connection into one channel, in arrival order per kind.
// The channel closes when ctx ends or the connection is lost. Job-completed
// events are not subscribed: go-libvirt cannot decode their typed
// parameters and drops them, so completion is read from job stats instead.
func (c *Conn) Subscribe(ctx context.Context, buffer int) (<-chan Event, error) {
	out := make(chan Event, buffer)
	kinds := []libvirt.DomainEventID{libvirt.DomainEventIDLifecycle, libvirt.DomainEventIDMigrationIteration}
	srcs := make([]<-chan any, 0, len(kinds))
	for _, id := range kinds {
		ch, err := callWithin(ctx, c, "subscribe events", c.timeout, func(l *libvirt.Libvirt) (<-chan any, error) {
			return l.SubscribeEvents(ctx, id, libvirt.OptDomain{})
		}, drainLate)
		if err != nil {
			for _, src := range srcs {
				drainLate(src, nil)
			}
			return nil, err
		}
		srcs = append(srcs, ch)
	}
	done := make(chan struct{}, len(srcs))
	for _, src := range srcs {
		go func() {
			defer func() { done <- struct{}{} }()
			// go-libvirt blocks its reader while a subscriber is slow, so
			// this loop only converts and hands over.
			for raw := range src {
				ev, ok := c.convert(raw)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
				}
			}
		}()
	}
	go func() {
		for range srcs {
			<-done
		}
		close(out)
	}()
	return out, nil
}

// drainLate empties a subscription that libvirt granted after Subscribe gave
// up on it: go-libvirt blocks its reader on an unread subscriber, which would
// stall every other call on the connection. The channel closes with ctx or
// the connection.
func drainLate(ch <-chan any, err error) {
	if err == nil {
		go func() {
			for range ch {
			}
		}()
	}
}

func (c *Conn) convert(raw any) (Event, bool) {
	now := time.Now()
	switch m := raw.(type) {
	case *libvirt.DomainEventCallbackLifecycleMsg:
		return Event{Kind: KindLifecycle, Socket: c.socket, Domain: m.Msg.Dom, Event: m.Msg.Event, Detail: m.Msg.Detail, Time: now}, true
	case *libvirt.DomainEventCallbackMigrationIterationMsg:
		return Event{Kind: KindIteration, Socket: c.socket, Domain: m.Dom, Iteration: m.Iteration, Time: now}, true
	}
	return Event{}, false
}

// Lifecycle delivers one domain's lifecycle events on this connection. The
// channel closes when ctx ends or the connection is lost.
func (c *Conn) Lifecycle(ctx context.Context, dom libvirt.Domain, buffer int) (<-chan Event, error) {
	src, err := callWithin(ctx, c, "subscribe lifecycle events", c.timeout, func(l *libvirt.Libvirt) (<-chan any, error) {
		return l.SubscribeEvents(ctx, libvirt.DomainEventIDLifecycle, libvirt.OptDomain{dom})
	}, drainLate)
	if err != nil {
		return nil, err
	}
	out := make(chan Event, buffer)
	go func() {
		defer close(out)
		// go-libvirt blocks its reader while a subscriber is slow: a full
		// buffer drops the event, as the reader only needs to look again.
		for raw := range src {
			// go-libvirt subscribes to every domain's events whatever
			// domain it is given.
			if ev, ok := c.convert(raw); ok && ev.Domain.UUID == dom.UUID {
				select {
				case out <- ev:
				default:
				}
			}
		}
	}()
	return out, nil
}
