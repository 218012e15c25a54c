package libvirtx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// go-libvirt's XDR decoder allocates whatever length a reply claims, an
// array's count or a string's size, before it reads a byte of it: 16 bytes
// claiming 2^31-1 typed parameters end ferryd with a fatal, unrecoverable
// out-of-memory. Any pod can serve such replies where the launcher glob
// looks. So every packet is walked here first, along the layout go-libvirt
// will decode it with, and refused unless each length fits in what is left
// of the packet and under libvirt's own limit for that field. A packet of a
// kind Ferry never asks for is refused too, or, for an event, dropped.

// Limits from libvirt's remote_protocol.x.
const (
	xdrStringMax     = 4 << 20 // REMOTE_STRING_MAX
	xdrCookieMax     = 4 << 20 // REMOTE_MIGRATE_COOKIE_MAX
	xdrAuthTypesMax  = 20      // REMOTE_AUTH_TYPE_LIST_MAX
	xdrDomainListMax = 16384   // REMOTE_DOMAIN_LIST_MAX
	// Ferry asks for the state group of every domain (two parameters
	// each) and the dirty-rate group of one (five, and one a vCPU in
	// dirty-ring mode): a listing of many records keeps the small bound,
	// and only a single record may carry the large one, so no reply
	// decodes into more than its records' share.
	xdrStateStatsMax     = 64
	xdrDirtyRateStatsMax = 1024
	xdrJobStatsMax       = 64   // REMOTE_DOMAIN_JOB_STATS_MAX
	xdrMemoryStatsMax    = 1024 // REMOTE_DOMAIN_MEMORY_STATS_MAX
	xdrFieldMax          = 80   // VIR_TYPED_PARAM_FIELD_LENGTH
	xdrMinTypedParam     = 4 + 4 + 4
	xdrMinNonnullDomain  = 4 + 16 + 4
)

// RPC header values (libvirt's virnetprotocol.x).
const (
	rpcRemoteProgram = 0x20008086
	rpcQEMUProgram   = 0x20008087
	// qemuCall marks a procedure of the QEMU program among the calls
	// followed, whose numbers overlap the remote program's.
	qemuCall       = 1 << 31
	rpcReply       = 1
	rpcMessage     = 2
	rpcStatusOK    = 0
	rpcStatusError = 1
)

// errDropPacket marks a packet that is skipped, not fatal: an event Ferry
// did not subscribe to, or an answer no call waits for (go-libvirt would
// drop either).
var errDropPacket = errors.New("event not subscribed to")

// xdrWalk reads an XDR payload without allocating; the first problem sticks.
type xdrWalk struct {
	b   []byte
	err error
}

func (w *xdrWalk) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

func (w *xdrWalk) take(n int, what string) []byte {
	if w.err != nil {
		return nil
	}
	if n < 0 || n > len(w.b) {
		w.fail("%s needs %d bytes, %d left", what, n, len(w.b))
		return nil
	}
	p := w.b[:n]
	w.b = w.b[n:]
	return p
}

func (w *xdrWalk) u32(what string) uint32 {
	p := w.take(4, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// bytes walks a variable-length string or opaque of at most max bytes,
// padded to 4.
func (w *xdrWalk) bytes(max int, what string) {
	n := w.u32(what + " length")
	if w.err != nil {
		return
	}
	if n > uint32(max) {
		w.fail("%s claims %d bytes, over libvirt's limit of %d", what, n, max)
		return
	}
	w.take(int(n+3)&^3, what)
}

// count walks an array's count: at most max, and no more elements than
// the bytes left can hold at min bytes each.
func (w *xdrWalk) count(max, min int, what string) int {
	n := w.u32(what + " count")
	if w.err != nil {
		return 0
	}
	if n > uint32(max) {
		w.fail("%s claims %d elements, over libvirt's limit of %d", what, n, max)
		return 0
	}
	if int(n) > len(w.b)/min {
		w.fail("%s claims %d elements in %d bytes", what, n, len(w.b))
		return 0
	}
	return int(n)
}

func (w *xdrWalk) optString(what string) {
	switch w.u32(what + " presence") {
	case 0:
	case 1:
		w.bytes(xdrStringMax, what)
	default:
		w.fail("%s: bad optional-string flag", what)
	}
}

func (w *xdrWalk) domain() {
	w.bytes(xdrStringMax, "domain name")
	w.take(16+4, "domain UUID and ID")
}

func (w *xdrWalk) typedParams(max int) {
	n := w.count(max, xdrMinTypedParam, "typed parameters")
	for i := 0; i < n && w.err == nil; i++ {
		w.bytes(xdrFieldMax, "typed parameter name")
		switch t := w.u32("typed parameter type"); t {
		case 1, 2, 6: // int, uint, boolean
			w.take(4, "typed parameter value")
		case 3, 4, 5: // llong, ullong, double
			w.take(8, "typed parameter value")
		case 7: // string
			w.bytes(xdrStringMax, "typed parameter value")
		default:
			w.fail("typed parameter of unknown type %d", t)
		}
	}
}

// replyLayouts are the replies to the calls Ferry makes, by procedure,
// walked as go-libvirt decodes them.
var replyLayouts = map[uint32]func(*xdrWalk){
	265:          func(w *xdrWalk) { w.bytes(xdrStringMax, "metadata") },                                         // domain get metadata
	qemuCall | 1: func(w *xdrWalk) { w.bytes(xdrStringMax, "QEMU monitor answer") },                              // QEMU domain monitor command
	1:            func(*xdrWalk) {},                                                                              // connect open
	2:            func(*xdrWalk) {},                                                                              // connect close
	4:            func(w *xdrWalk) { w.take(8, "hypervisor version") },                                           // connect get version
	60:           func(w *xdrWalk) { w.take(4, "supported") },                                                    // connect supports feature
	7:            func(w *xdrWalk) { w.bytes(xdrStringMax, "capabilities") },                                     // connect get capabilities
	11:           func(w *xdrWalk) { w.domain() },                                                                // domain define XML
	12:           func(*xdrWalk) {},                                                                              // domain destroy
	14:           func(w *xdrWalk) { w.bytes(xdrStringMax, "domain XML") },                                       // domain get XML desc
	15:           func(w *xdrWalk) { w.take(4, "autostart") },                                                    // domain get autostart
	17:           func(w *xdrWalk) { w.take(8, "max memory") },                                                   // domain get max memory
	23:           func(w *xdrWalk) { w.domain() },                                                                // domain lookup by name
	28:           func(*xdrWalk) {},                                                                              // domain resume
	34:           func(*xdrWalk) {},                                                                              // domain suspend
	29:           func(*xdrWalk) {},                                                                              // domain set autostart
	66:           func(w *xdrWalk) { w.take(4*w.count(xdrAuthTypesMax, 4, "auth types"), "auth types") },         // auth list
	70:           func(w *xdrWalk) { w.take(4, "complete") },                                                     // auth polkit, go-libvirt's own call
	150:          func(w *xdrWalk) { w.take(4, "active") },                                                       // domain is active
	151:          func(w *xdrWalk) { w.take(4, "persistent") },                                                   // domain is persistent
	157:          func(w *xdrWalk) { w.take(8, "version") },                                                      // connect get lib version
	159:          func(w *xdrWalk) { w.take(12*w.count(xdrMemoryStatsMax, 12, "memory stats"), "memory stats") }, // domain memory stats
	164:          func(*xdrWalk) {},                                                                              // domain abort job
	166:          func(*xdrWalk) {},                                                                              // domain migrate set max downtime
	194:          func(w *xdrWalk) { w.take(24, "allocation, capacity and physical size") },                      // domain get block info
	207:          func(*xdrWalk) {},                                                                              // domain migrate set max speed
	212:          func(w *xdrWalk) { w.take(8, "state and reason") },                                             // domain get state
	242:          func(w *xdrWalk) { w.take(8, "max speed") },                                                    // domain migrate get max speed
	231:          func(*xdrWalk) {},                                                                              // domain undefine flags
	298:          func(w *xdrWalk) { w.take(4, "job type"); w.typedParams(xdrJobStatsMax) },                      // domain get job stats
	302:          func(w *xdrWalk) { w.bytes(xdrCookieMax, "cookie"); w.bytes(xdrStringMax, "domain XML") },      // begin3
	303:          func(w *xdrWalk) { w.bytes(xdrCookieMax, "cookie"); w.optString("URI") },                       // prepare3
	305:          func(w *xdrWalk) { w.bytes(xdrCookieMax, "cookie") },                                           // perform3
	306:          func(w *xdrWalk) { w.domain(); w.bytes(xdrCookieMax, "cookie") },                               // finish3
	307:          func(*xdrWalk) {},                                                                              // confirm3
	316:          func(w *xdrWalk) { w.take(4, "callback ID") },                                                  // event callback register any
	273: func(w *xdrWalk) { // connect list all domains
		n := w.count(xdrDomainListMax, xdrMinNonnullDomain, "domains")
		for i := 0; i < n && w.err == nil; i++ {
			w.domain()
		}
		w.take(4, "count")
	},
	317: func(*xdrWalk) {}, // event callback deregister any
	344: func(w *xdrWalk) { // connect get all domain stats
		n := w.count(xdrDomainListMax, xdrMinNonnullDomain+4, "domain stats records")
		per := xdrStateStatsMax
		if n == 1 {
			per = xdrDirtyRateStatsMax
		}
		for i := 0; i < n && w.err == nil; i++ {
			w.domain()
			w.typedParams(per)
		}
	},
	364: func(*xdrWalk) {},                              // domain migrate start post-copy
	387: func(w *xdrWalk) { w.take(8, "max downtime") }, // domain migrate get max downtime
	393: func(w *xdrWalk) { w.take(4, "comparison") },   // connect compare hypervisor cpu
	427: func(*xdrWalk) {},                              // domain start dirty rate calc
	442: func(*xdrWalk) {},                              // domain abort job flags
}

// eventLayouts are the events Ferry subscribes to.
var eventLayouts = map[uint32]func(*xdrWalk){
	318: func(w *xdrWalk) { w.take(4, "callback ID"); w.domain(); w.take(8, "event and detail") }, // lifecycle
	359: func(w *xdrWalk) { w.take(4, "callback ID"); w.domain(); w.take(4, "iteration") },        // migration iteration
	363: func(w *xdrWalk) { w.take(4, "callback ID"); w.domain(); w.typedParams(xdrJobStatsMax) }, // job completed
}

// goLibvirtEvents are the procedures go-libvirt's Route decodes as events,
// whatever a packet's type, status or serial: a packet is checked the way
// go-libvirt will take it, not the way it says it is.
var goLibvirtEvents = map[uint32]bool{318: true, 319: true, 320: true, 321: true, 322: true, 323: true, 324: true,
	325: true, 326: true, 327: true, 328: true, 329: true, 330: true, 331: true, 332: true, 333: true, 346: true,
	348: true, 354: true, 359: true, 363: true, 367: true, 379: true}

const rpcQEMUMonitorEvent = 6 // QEMU program: go-libvirt's only event there

// checkPacket walks one whole packet, its length word excluded: nil to
// hand it to go-libvirt, errDropPacket to skip it, any other error to
// drop the connection. A reply is walked as the reply to the call waiting
// on its serial, which is what go-libvirt decodes it as, not as the
// procedure its header names.
func checkPacket(p []byte, calls *rpcCalls) error {
	w := &xdrWalk{b: p}
	prog, _ := w.u32("program"), w.u32("version")
	proc, typ := w.u32("procedure"), w.u32("type")
	serial, status := w.u32("serial"), w.u32("status")
	if w.err != nil {
		return w.err
	}
	switch {
	case prog == rpcQEMUProgram && proc == rpcQEMUMonitorEvent:
		return errDropPacket
	case prog == rpcRemoteProgram && goLibvirtEvents[proc]:
		layout := eventLayouts[proc]
		if layout == nil {
			return errDropPacket
		}
		layout(w)
		return w.whole(fmt.Sprintf("event %d", proc))
	}
	call, ok := calls.take(serial)
	if !ok {
		// No call waits on it: go-libvirt would drop it too.
		return errDropPacket
	}
	if prog == rpcQEMUProgram {
		proc |= qemuCall
	}
	if (prog != rpcRemoteProgram && prog != rpcQEMUProgram) || proc != call || typ != rpcReply {
		return fmt.Errorf("answer to call %d (procedure %d) is of program %#x, procedure %d, type %d", serial, call, prog, proc, typ)
	}
	switch status {
	case rpcStatusError:
		// As go-libvirt reads an error: code, domain, a word it skips, the
		// message, the level; the rest of libvirt's error it never reads.
		w.take(12, "error code")
		w.bytes(xdrStringMax, "error message")
		w.take(4, "error level")
		if w.err != nil {
			return fmt.Errorf("error answering procedure %d: %w", call, w.err)
		}
		return nil
	case rpcStatusOK:
		layout := replyLayouts[call]
		if layout == nil {
			return fmt.Errorf("reply to procedure %d, which Ferry never calls", call)
		}
		layout(w)
		return w.whole(fmt.Sprintf("procedure %d", call))
	}
	return fmt.Errorf("answer to procedure %d with status %d", call, status)
}

// whole says what went wrong walking it, or that it did not end where the
// packet does.
func (w *xdrWalk) whole(what string) error {
	if w.err == nil && len(w.b) != 0 {
		w.fail("%d bytes past its end", len(w.b))
	}
	if w.err != nil {
		return fmt.Errorf("%s: %w", what, w.err)
	}
	return nil
}

// rpcCalls follows the calls go-libvirt writes, by serial, so each answer
// is checked as the reply to its own call.
type rpcCalls struct {
	mu    sync.Mutex
	calls map[uint32]uint32 // serial -> procedure
	// The outgoing stream is cut anywhere: a header may come in pieces.
	hdr  [28]byte
	have int
	skip uint32
}

// expect records a call of procedure proc under serial.
func (r *rpcCalls) expect(serial, proc uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(serial, proc)
}

// record is expect with r.mu held.
func (r *rpcCalls) record(serial, proc uint32) {
	if r.calls == nil {
		r.calls = map[uint32]uint32{}
	}
	r.calls[serial] = proc
}

func (r *rpcCalls) take(serial uint32) (uint32, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	proc, ok := r.calls[serial]
	delete(r.calls, serial)
	return proc, ok
}

// between says go-libvirt's outgoing stream is between two packets, where
// a packet of Ferry's own may go.
func (r *rpcCalls) between() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.have == 0 && r.skip == 0
}

// written reads the calls out of bytes go-libvirt writes.
func (r *rpcCalls) written(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(b) > 0 {
		if r.skip > 0 {
			n := uint32(min(len(b), int(min(r.skip, 1<<30))))
			b, r.skip = b[n:], r.skip-n
			continue
		}
		n := copy(r.hdr[r.have:], b)
		r.have += n
		b = b[n:]
		if r.have < len(r.hdr) {
			return
		}
		r.have = 0
		h := r.hdr[:]
		length := binary.BigEndian.Uint32(h[0:4])
		if binary.BigEndian.Uint32(h[16:20]) == 0 { // a call
			proc := binary.BigEndian.Uint32(h[12:16])
			if binary.BigEndian.Uint32(h[4:8]) == rpcQEMUProgram {
				proc |= qemuCall
			}
			r.record(binary.BigEndian.Uint32(h[20:24]), proc)
		}
		if length > uint32(len(r.hdr)) {
			r.skip = length - uint32(len(r.hdr))
		}
	}
}
