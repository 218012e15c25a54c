package libvirtx

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"
)

// Remote procedure numbers of libvirt's remote_protocol.x that the fake
// answers.
const (
	procConnectOpen        = 1
	procConnectClose       = 2
	procDomainGetXMLDesc   = 14
	procDomainGetState     = 212
	procConnectListAll     = 273
	procDomainGetMaxMemory = 17
	procAuthList           = 66
	procGetLibVersion      = 157
	procDomainAbortJob     = 164
	procDomainGetJobStats  = 298
	procMigratePerform3    = 305
	procEventRegisterAny   = 316
	procEventDeregisterAny = 317
)

const (
	remoteProgram = 0x20008086
	replyType     = 1
	statusOK      = 0
	statusError   = 1
)

// fakeLibvirt speaks just enough of libvirtd's RPC protocol, on a real unix
// socket, for Dial, the pool and the wrappers under test. Each call is
// answered on its own goroutine, as libvirtd's workers do, so one call can
// be held back while others on the same connection are answered.
type fakeLibvirt struct {
	path string
	ln   net.Listener

	mu    sync.Mutex
	calls []fakeCall
	conns []net.Conn
	// answer, when set, is asked first; ok=false falls back to the
	// defaults. It may block to answer late.
	answer func(proc uint32, args []byte) (reply []byte, err *libvirt.Error, ok bool)
	nextID int32
}

type fakeCall struct {
	proc uint32
	args []byte
}

func newFakeLibvirt(t *testing.T, path string) *fakeLibvirt {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "libvirt-sock")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLibvirt{path: path, ln: ln}
	go f.accept()
	t.Cleanup(f.Close)
	return f
}

func (f *fakeLibvirt) setAnswer(a func(proc uint32, args []byte) ([]byte, *libvirt.Error, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = a
}

// Close stops listening and drops every connection, as a dying libvirtd does.
func (f *fakeLibvirt) Close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// called returns the arguments of every call of proc so far.
func (f *fakeLibvirt) called(proc uint32) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]byte
	for _, c := range f.calls {
		if c.proc == proc {
			out = append(out, c.args)
		}
	}
	return out
}

func (f *fakeLibvirt) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		go f.serve(c)
	}
}

func (f *fakeLibvirt) serve(c net.Conn) {
	var wmu sync.Mutex
	for {
		var hdr [28]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(hdr[0:4])
		proc := binary.BigEndian.Uint32(hdr[12:16])
		serial := binary.BigEndian.Uint32(hdr[20:24])
		args := make([]byte, int(size)-len(hdr))
		if _, err := io.ReadFull(c, args); err != nil {
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, fakeCall{proc, args})
		answer := f.answer
		f.mu.Unlock()
		go func() {
			reply, lerr, ok := []byte(nil), (*libvirt.Error)(nil), false
			if answer != nil {
				reply, lerr, ok = answer(proc, args)
			}
			if !ok {
				reply = f.defaultReply(proc)
			}
			status := uint32(statusOK)
			if lerr != nil {
				status, reply = statusError, encodeRemoteError(*lerr)
			}
			var out [28]byte
			binary.BigEndian.PutUint32(out[0:4], uint32(len(out)+len(reply)))
			binary.BigEndian.PutUint32(out[4:8], remoteProgram)
			binary.BigEndian.PutUint32(out[8:12], 1)
			binary.BigEndian.PutUint32(out[12:16], proc)
			binary.BigEndian.PutUint32(out[16:20], replyType)
			binary.BigEndian.PutUint32(out[20:24], serial)
			binary.BigEndian.PutUint32(out[24:28], status)
			wmu.Lock()
			defer wmu.Unlock()
			c.Write(append(out[:], reply...))
		}()
	}
}

func (f *fakeLibvirt) defaultReply(proc uint32) []byte {
	switch proc {
	case procAuthList:
		return be32(1, 0) // one auth type: none
	case procGetLibVersion:
		return be64(11003000)
	case procDomainGetMaxMemory:
		return be64(1 << 20) // KiB: a 1 GiB guest
	case procDomainGetJobStats:
		return be32(0, 0) // VIR_DOMAIN_JOB_NONE, no parameters
	case procMigratePerform3:
		return be32(0) // empty cookie
	case procEventRegisterAny:
		f.mu.Lock()
		f.nextID++
		id := f.nextID
		f.mu.Unlock()
		return be32(uint32(id))
	}
	return nil
}

// encodeRemoteError lays out remote_error: code, domain (VIR_FROM_QEMU,
// 10), message (a remote_string, so present-flag first), level, then the
// unused optional and integer fields.
func encodeRemoteError(e libvirt.Error) []byte {
	msg := []byte(e.Message)
	b := be32(e.Code, 10, 1, uint32(len(msg)))
	b = append(b, msg...)
	b = append(b, make([]byte, (4-len(msg)%4)%4)...)
	return append(b, be32(2, 0, 0, 0, 0, 0, 0, 0)...)
}

func be32(vs ...uint32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// lastFlags reads the trailing unsigned int flags argument most calls end with.
func lastFlags(args []byte) uint32 {
	if len(args) < 4 {
		return ^uint32(0)
	}
	return binary.BigEndian.Uint32(args[len(args)-4:])
}
