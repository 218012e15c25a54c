package libvirtxtest

import (
	libvirt "github.com/digitalocean/go-libvirt"
)

// subscribe registers a client's callback for an event ID and returns its
// callback ID.
func (s *Server) subscribe(c *conn, args []byte) []byte {
	r := argReader{args}
	id := libvirt.DomainEventID(r.u32())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastCB++
	c.subs[s.lastCB] = id
	return new(XDR).I32(s.lastCB).Bytes()
}

func (s *Server) unsubscribe(c *conn, args []byte) {
	r := argReader{args}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(c.subs, int32(r.u32()))
}

// Lifecycle sends a lifecycle event (virDomainEventType and its detail)
// about a domain to every client subscribed to them. It changes no state:
// a test sets the state the event reports first, as libvirt has changed
// it by the time its event is read.
func (s *Server) Lifecycle(name string, event, detail int32) {
	s.t.Helper()
	s.send(name, libvirt.DomainEventIDLifecycle, ProcDomainEventCallbackLifecycle, Words(uint32(event), uint32(detail)))
}

// Iteration sends a migration-iteration event: pass number iteration of a
// domain's migration has begun.
func (s *Server) Iteration(name string, iteration int32) {
	s.t.Helper()
	s.send(name, libvirt.DomainEventIDMigrationIteration, ProcDomainEventCallbackMigrationIteration, Words(uint32(iteration)))
}

// send writes an event to each subscribed client. An event nobody
// receives fails the test: libvirt drops it, and the test meant it to be
// read.
func (s *Server) send(name string, id libvirt.DomainEventID, proc uint32, body []byte) {
	s.t.Helper()
	s.mu.Lock()
	d, ok := s.known[name]
	type to struct {
		c  *conn
		cb int32
	}
	var tos []to
	for _, c := range s.conns {
		for cb, sub := range c.subs {
			if sub == id {
				tos = append(tos, to{c, cb})
			}
		}
	}
	s.mu.Unlock()
	if !ok {
		s.t.Fatalf("libvirtxtest: an event about %q, a domain never set", name)
	}
	if len(tos) == 0 {
		s.t.Errorf("libvirtxtest: event %d about %s: no client has subscribed to it", id, name)
	}
	for _, t := range tos {
		x := new(XDR).I32(t.cb).Domain(d.Name, d.UUID, d.ID)
		t.c.write(packet(remoteProgram, proc, typeMessage, 0, statusOK, append(x.Bytes(), body...)))
	}
}
