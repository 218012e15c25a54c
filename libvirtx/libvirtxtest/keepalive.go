package libvirtxtest

import (
	"time"
)

// libvirt's keepalive program (virkeepaliveprotocol.x): packets of type
// MESSAGE with no body, below the remote program.
const (
	keepAliveProgram = 0x6b656570
	KeepAlivePing    = 1
	KeepAlivePong    = 2
	// featureProgramKeepAlive is VIR_DRV_FEATURE_PROGRAM_KEEPALIVE.
	featureProgramKeepAlive = 10
)

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// NoKeepAlive makes the fake answer as a libvirt without keepalive: 0 to
// virConnectSupportsFeature(VIR_DRV_FEATURE_PROGRAM_KEEPALIVE).
func (s *Server) NoKeepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noKeepAlive = true
}

// PingClients has the fake PING, every interval, each client that asked
// for keepalive from then on, as libvirtd does (its own interval; it
// counts nothing: a client that never answers is not cut).
func (s *Server) PingClients(every time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pingEvery = every
}

// Freeze stops the fake as SIGSTOP stops libvirtd: nothing is answered,
// no keepalive PONG or PING sent, no event, until thaw is called; what
// clients send meanwhile is answered then. Close thaws it.
func (s *Server) Freeze() (thaw func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gate := make(chan struct{})
	s.thawed = gate
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-gate: // thawed by Close
		default:
			close(gate)
		}
	}
}

func (s *Server) waitThawed() {
	s.mu.Lock()
	gate := s.thawed
	s.mu.Unlock()
	<-gate
}

// KeepAlives is how many keepalive packets of procedure proc
// (KeepAlivePing, KeepAlivePong) clients have sent.
func (s *Server) KeepAlives(proc uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.prog == keepAliveProgram && c.proc == proc {
			n++
		}
	}
	return n
}

// keepAliveMessage answers a client's PING, in the reading loop as
// libvirtd answers from its event loop: never behind a slow call.
func (s *Server) keepAliveMessage(c *conn, proc uint32, args []byte) {
	s.mu.Lock()
	s.calls = append(s.calls, call{keepAliveProgram, proc, args})
	s.mu.Unlock()
	if proc == KeepAlivePing {
		c.write(packet(keepAliveProgram, KeepAlivePong, typeMessage, 0, statusOK, nil))
	}
}

// supportsFeature answers virConnectSupportsFeature: keepalive, which
// starts the fake's PINGs to that client, and nothing else.
func (s *Server) supportsFeature(c *conn, args []byte) []byte {
	r := argReader{args}
	if r.u32() != featureProgramKeepAlive {
		return Words(0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noKeepAlive {
		return Words(0)
	}
	if !c.pinging {
		c.pinging = true
		go s.ping(c)
	}
	return Words(1)
}

// ping sends PINGs to one client while it is connected and the fake's
// interval is set.
func (s *Server) ping(c *conn) {
	for {
		s.mu.Lock()
		every, open := s.pingEvery, !s.closed && s.connected(c)
		s.mu.Unlock()
		if !open {
			return
		}
		if every <= 0 {
			every = 10 * time.Millisecond
		} else {
			c.write(packet(keepAliveProgram, KeepAlivePing, typeMessage, 0, statusOK, nil))
		}
		time.Sleep(every)
	}
}

// connected says c is still open; s.mu is held.
func (s *Server) connected(c *conn) bool {
	for _, o := range s.conns {
		if o == c {
			return true
		}
	}
	return false
}
