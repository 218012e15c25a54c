package libvirtxtest

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// RPC header values (libvirt's virnetprotocol.x).
const (
	remoteProgram = 0x20008086
	typeReply     = 1
	typeMessage   = 2
	statusOK      = 0
	statusError   = 1
	headerSize    = 28
)

// AnswerFunc answers a call in the fake's place; ok=false leaves the call
// to the fake. It may block to answer late: each call is answered on its
// own goroutine, as libvirtd's workers do, so one call can be held back
// while others on the same connection are answered.
type AnswerFunc func(proc uint32, args []byte) (reply []byte, err *libvirt.Error, ok bool)

// Server is a fake libvirtd on a unix socket.
type Server struct {
	t    testing.TB
	path string
	ln   *net.UnixListener

	mu       sync.Mutex
	closed   bool
	accepted int
	conns    []*conn // open ones
	calls    []call
	answer   AnswerFunc
	qemu     AnswerFunc
	ignore   func(proc uint32) bool
	lastCB   int32
	// The domains by name, and every identity a name has had, so that an
	// event can still name a domain that is gone.
	domains map[string]*domain
	known   map[string]Domain
	// Keepalive (keepalive.go): whether the fake has it, how often it
	// pings a client that asked for it, and the gate a frozen fake waits at.
	noKeepAlive bool
	pingEvery   time.Duration
	thawed      chan struct{}
}

type call struct {
	prog, proc uint32
	args       []byte
}

// conn is one client connection; its subscriptions are guarded by the
// server's mu, its writes by wmu (replies and events interleave).
type conn struct {
	net.Conn
	s    *Server
	wmu  sync.Mutex
	subs map[int32]libvirt.DomainEventID // callback ID -> event ID
	// pinging is set once the client asked for keepalive.
	pinging bool
}

// New listens at path, or in a temporary directory when path is empty, and
// serves until the test ends or Close.
func New(t testing.TB, path string) *Server {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "libvirt-sock")
	}
	ln, err := listen(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, path: path, ln: ln, domains: map[string]*domain{}, known: map[string]Domain{}, thawed: closedChan()}
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// sunPathMax is what a unix socket address holds, its NUL excluded.
const sunPathMax = 107

// listen listens at path and leaves the socket file to the fake: Close
// removes it, Kill leaves it. A longer path than an address holds (a
// virt-launcher's socket under the kubelet's pods directory is) is bound
// at a short one first and renamed: a socket's inode, not its name, is
// what a connect reaches.
func listen(path string) (*net.UnixListener, error) {
	bind := path
	if len(path) > sunPathMax {
		dir, err := os.MkdirTemp("", "lvt")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		bind = filepath.Join(dir, "s")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bind, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if bind != path {
		if err := os.Rename(bind, path); err != nil {
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Answer sets the hook asked before the fake answers a call (nil: none).
func (s *Server) Answer(f AnswerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = f
}

// qemuProgram is libvirt's QEMU program (qemu_protocol.x): procedure 1 is
// a monitor command passed through to the domain's QEMU.
const qemuProgram = 0x20008087

// AnswerQEMU sets the hook that answers calls of libvirt's QEMU program;
// without one (or when it declines) the fake refuses them.
func (s *Server) AnswerQEMU(f AnswerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.qemu = f
}

// QEMUCalls returns the arguments of every call of the QEMU program's
// procedure proc so far.
func (s *Server) QEMUCalls(proc uint32) [][]byte { return s.callsOf(qemuProgram, proc) }

// Ignore has the fake read the calls f picks and never answer them, as a
// daemon whose workers never return, while it goes on answering what f
// does not pick and keepalive PINGs (nil: none). No goroutine waits on an
// ignored call, in the fake or anywhere.
func (s *Server) Ignore(f func(proc uint32) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignore = f
}

// Calls returns the arguments of every call of the remote program's
// procedure proc so far, in arrival order.
func (s *Server) Calls(proc uint32) [][]byte { return s.callsOf(remoteProgram, proc) }

func (s *Server) callsOf(prog, proc uint32) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, c := range s.calls {
		if c.prog == prog && c.proc == proc {
			out = append(out, c.args)
		}
	}
	return out
}

// Connections is how many connections the fake has accepted.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Send writes raw bytes on every open connection, as a broken daemon
// would.
func (s *Server) Send(raw []byte) {
	s.mu.Lock()
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		c.write(raw)
	}
}

// Close stops listening, removes its socket and drops every connection, as
// a libvirtd that stops does.
func (s *Server) Close() {
	s.stop()
	os.Remove(s.path)
}

// Kill stops listening and drops every connection but leaves its socket
// file, as a libvirtd that was killed does: a connect is refused until
// whoever owns the directory removes it.
func (s *Server) Kill() { s.stop() }

func (s *Server) stop() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	select {
	case <-s.thawed:
	default:
		close(s.thawed) // a frozen fake's waiting writes go, and fail
	}
	for _, c := range s.conns {
		c.Close()
	}
}

// logf logs unless the test is over (a late call's answer would panic
// logging then).
func (s *Server) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.t.Logf(format, args...)
	}
}

func (s *Server) accept() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{Conn: nc, s: s, subs: map[int32]libvirt.DomainEventID{}}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.accepted++
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *Server) serve(c *conn) {
	defer s.drop(c)
	for {
		var hdr [headerSize]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(hdr[0:4])
		prog := binary.BigEndian.Uint32(hdr[4:8])
		proc := binary.BigEndian.Uint32(hdr[12:16])
		serial := binary.BigEndian.Uint32(hdr[20:24])
		if size < headerSize {
			return
		}
		args := make([]byte, size-headerSize)
		if _, err := io.ReadFull(c, args); err != nil {
			return
		}
		s.waitThawed()
		if prog == keepAliveProgram {
			s.keepAliveMessage(c, proc, args)
			continue
		}
		s.mu.Lock()
		s.calls = append(s.calls, call{prog, proc, args})
		answer, ignore := s.answer, s.ignore
		if prog == qemuProgram {
			answer = s.qemu
		}
		s.mu.Unlock()
		if ignore != nil && prog == remoteProgram && ignore(proc) {
			continue
		}
		go func() {
			var reply []byte
			var lerr *libvirt.Error
			ok := false
			if answer != nil && (prog == remoteProgram || prog == qemuProgram) {
				reply, lerr, ok = answer(proc, args)
			}
			if !ok {
				reply, lerr = s.reply(c, prog, proc, args)
			}
			status := uint32(statusOK)
			if lerr != nil {
				status, reply = statusError, ErrorBody(*lerr)
			}
			// Header and body apart: a large reply is sent, not copied.
			c.write(header(prog, proc, typeReply, serial, status, len(reply)), reply)
		}()
	}
}

// drop forgets a connection the client closed, and its subscriptions.
func (s *Server) drop(c *conn) {
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = slices.DeleteFunc(s.conns, func(o *conn) bool { return o == c })
}

// write sends the parts of one packet, none of another between them.
func (c *conn) write(parts ...[]byte) {
	c.s.waitThawed()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, b := range parts {
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// packet frames a body: its length word, then the header.
func packet(prog, proc, typ, serial, status uint32, body []byte) []byte {
	return append(header(prog, proc, typ, serial, status, len(body)), body...)
}

// header is what precedes a body of n bytes: its length word, then the
// header proper.
func header(prog, proc, typ, serial, status uint32, n int) []byte {
	return new(XDR).U32(uint32(headerSize+n), prog, 1, proc, typ, serial, status).Bytes()
}
