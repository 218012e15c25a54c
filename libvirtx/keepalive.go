package libvirtx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// libvirt's keepalive, as libvirt 9 to 12 speak it (src/rpc/virkeepalive.c,
// virkeepaliveprotocol.x, virnetclient.c, virnetserverclient.c,
// virnetserver.c, src/remote/remote_driver.c):
//
//   - A keepalive packet is program 0x6b656570 ("keep"), version 1, type
//     MESSAGE (2), status OK, serial 0, no body; procedure 1 is PING and 2
//     is PONG. Neither side ever sees it as an RPC.
//   - libvirtd gives every client a keepalive (virNetServerAddClient, with
//     libvirtd.conf's keepalive_interval and keepalive_count, 5 and 5 by
//     default) and answers a PING with a PONG from its event loop as it
//     reads the packet (virNetServerClientDispatchRead), not from a worker:
//     a daemon whose workers are all busy still answers, one whose main
//     loop is stopped (SIGSTOP, D state, a deadlock) does not.
//   - libvirtd pings a client only once the client asked
//     virConnectSupportsFeature(VIR_DRV_FEATURE_PROGRAM_KEEPALIVE = 10),
//     which starts its timer (virNetServerClientStartKeepAlive) and answers
//     1. libvirt's client asks right after authenticating (doRemoteOpen)
//     and leaves keepalive off when the answer is not 1.
//   - Either side takes any packet received for a sign of life
//     (virKeepAliveCheckMessage resets its count) and sends a PING after an
//     interval without one, again each interval, count times; one interval
//     after the last unanswered PING, (count+1)*interval of silence, it
//     gives up. The client closes the connection
//     (VIR_CONNECT_CLOSE_REASON_KEEPALIVE); the daemon closes the client
//     (virNetServerClientImmediateClose), and with it the connection's
//     libvirt state (its close callbacks: an incoming migration's guest
//     prepared on it is destroyed, a source's migration job cancelled; see
//     OnSilence).
//   - libvirtd stops reading a client that has max_client_requests (5)
//     calls in flight until one is answered: its PONGs wait as well, which
//     libvirtd warns "may result in keep-alive timeouts".
//
// Ferry's side: every connection asks for keepalive once ConnectToURI is
// done, answers libvirtd's PINGs below go-libvirt (framedConn), never
// letting it see one, and sends its own PINGs the same way libvirt does.
// Ferry answers as long as its reader runs, which is as long as the
// connection lives; a ferryd stopped for libvirtd's 30 s loses its
// connections, as a killed one does.

// Keepalive wire values.
const (
	keepAliveProgram = 0x6b656570
	keepAliveVersion = 1
	keepAlivePing    = 1
	keepAlivePong    = 2
	// VIR_DRV_FEATURE_PROGRAM_KEEPALIVE, asked of REMOTE_PROC_CONNECT_SUPPORTS_FEATURE.
	featureProgramKeepAlive = 10
)

// Ferry's keepalive: a PING after 5 s of silence, as libvirt's own client
// and daemon send; unresponsive after 3 silent intervals, 15 s, not
// libvirt's 30: a hung daemon is to be alerted on within 30 s, a scrape
// included. Nothing is lost by an early verdict on a connection that only
// reports it (ReportSilence), and libvirtd's event loop answers in
// milliseconds however busy its workers are.
const (
	DefaultKeepAliveInterval = 5 * time.Second
	DefaultKeepAliveCount    = 3
)

// KeepAlive is how patiently a connection waits on its daemon.
type KeepAlive struct {
	Interval time.Duration // silence before a PING; DefaultKeepAliveInterval if 0
	Count    int           // silent intervals before unresponsive; DefaultKeepAliveCount if 0
}

func (k KeepAlive) withDefaults() KeepAlive {
	if k.Interval <= 0 {
		k.Interval = DefaultKeepAliveInterval
	}
	if k.Count <= 0 {
		k.Count = DefaultKeepAliveCount
	}
	return k
}

// limit is the silence after which the daemon is unresponsive.
func (k KeepAlive) limit() time.Duration { return k.Interval * time.Duration(k.Count) }

// OnSilence is what a connection does once its daemon is unresponsive.
//
// A cut reaches a hung daemon only when it goes on, and what it then does
// with the closed connection's migration (src/qemu/qemu_migration.c,
// qemuMigrationAnyConnectionClosed; a call running on the connection
// keeps it open until the call returns, its answer lost):
//
//   - source, after Begin3 (BEGIN3): the job is dropped, the guest runs on;
//   - source, in Perform3 (PERFORM3): Perform3 runs to its end unheard, then
//     as below;
//   - source, Perform3 done (PERFORM3_DONE): in pre-copy the job ends
//     cancelled with the guest left paused, and Confirm3 has no job to
//     confirm or resume: one copy paused, the other maybe started by a
//     Finish3, none told; in post-copy it is post-copy-failed;
//   - target, prepared (PREPARE): the incoming guest is destroyed
//     (autodestroy), after a post-copy switch the only up-to-date copy;
//   - target, in Finish3: Finish3 runs to its end unheard: the guest may run
//     there with no one told.
//
// So a migration's connections are never cut: QEMU migrates on meanwhile,
// and waiting for the daemon loses nothing.
type OnSilence int

const (
	// ReportSilence only says so (Conn.Unresponsive) and goes on waiting:
	// for a connection libvirt ties state to.
	ReportSilence OnSilence = iota
	// CutOnSilence closes the connection, as libvirt's own client does:
	// for connections that only watch.
	CutOnSilence
)

// ErrUnresponsive marks a connection cut because its daemon sent nothing
// for the keepalive's limit.
var ErrUnresponsive = errors.New("libvirt sent nothing, not even a keepalive answer")

// keepAlive runs one connection's side of the protocol.
type keepAlive struct {
	cfg  KeepAlive
	cut  bool
	f    *framedConn
	out  chan []byte // packets for the writer, never waited on
	stop chan struct{}
	once sync.Once
}

var (
	pingPacket = keepAlivePacket(keepAlivePing)
	pongPacket = keepAlivePacket(keepAlivePong)
)

func keepAlivePacket(proc uint32) []byte {
	var b []byte
	for _, v := range []uint32{minPacket, keepAliveProgram, keepAliveVersion, proc, rpcMessage, 0, rpcStatusOK} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// isKeepAlive says p (a packet, its length word excluded) is of the
// keepalive program, whatever else it says.
func isKeepAlive(p []byte) bool {
	return len(p) >= 4 && binary.BigEndian.Uint32(p) == keepAliveProgram
}

// keepAliveMessage answers a PING, and refuses a keepalive packet that is
// not one libvirt sends.
func (c *framedConn) keepAliveMessage(p []byte) error {
	h := p[:min(len(p), 24)]
	if len(p) != 24 || binary.BigEndian.Uint32(h[4:]) != keepAliveVersion || binary.BigEndian.Uint32(h[12:]) != rpcMessage {
		return fmt.Errorf("keepalive packet of %d bytes, header % x: not as libvirt sends one", len(p)+4, h)
	}
	switch binary.BigEndian.Uint32(h[8:]) {
	case keepAlivePing:
		if k := c.ka.Load(); k != nil {
			k.send(pongPacket)
		}
	case keepAlivePong:
		// Its arrival is all it says.
	}
	return nil
}

// startKeepAlive asks libvirtd for keepalive, as libvirt's client does,
// and runs it if the daemon has it; an older daemon's "no" leaves it off.
func startKeepAlive(ctx context.Context, c *Conn, cfg KeepAlive, on OnSilence) error {
	k := &keepAlive{cfg: cfg.withDefaults(), cut: on == CutOnSilence, f: c.dialer.conn(), out: make(chan []byte, 4), stop: make(chan struct{})}
	// Answering comes first: the daemon may ping as soon as it said yes.
	k.f.ka.Store(k)
	go k.write()
	supported, err := call(ctx, c, "keepalive", func(l *libvirt.Libvirt) (int32, error) {
		return l.ConnectSupportsFeature(featureProgramKeepAlive)
	})
	var le libvirt.Error
	switch {
	case errors.As(err, &le):
		supported = 0 // a daemon that does not know the question
	case err != nil:
		k.end()
		return err
	}
	if supported != 1 {
		k.f.ka.Store(nil)
		k.end()
		return nil
	}
	c.ka = k
	go k.run(c.l.Disconnected())
	return nil
}

func (k *keepAlive) end() { k.once.Do(func() { close(k.stop) }) }

// send hands a packet to the writer, or drops it if PINGs and PONGs are
// already waiting: one of each says as much, and neither the reader nor
// the timer may wait on a socket libvirtd does not drain.
func (k *keepAlive) send(p []byte) {
	select {
	case k.out <- p:
	default:
	}
}

func (k *keepAlive) write() {
	for {
		select {
		case <-k.stop:
			return
		case p := <-k.out:
			if k.f.writeControl(p) != nil {
				return
			}
		}
	}
}

// run pings after each interval of silence, each PING given an interval
// to be answered, and once the silence reaches Interval*Count cuts the
// connection or leaves it to be reported; PINGs already sent are answered
// when a stopped daemon goes on, which ends the silence. Any packet from
// the daemon (an answer, an event, its own PING) starts the count again.
func (k *keepAlive) run(gone <-chan struct{}) {
	defer k.end()
	// Woken when the next PING or the cut falls due as the silence goes
	// on, not on a ticker: a node holds one of these per launcher. A
	// packet meanwhile only makes the wake early, and it sleeps again.
	floor := max(k.cfg.Interval/5, time.Millisecond)
	timer := time.NewTimer(k.cfg.Interval)
	defer timer.Stop()
	var pinged time.Time // the silence the last PING was sent in
	sent := 0
	for {
		select {
		case <-gone:
			return
		case <-timer.C:
		}
		heard := k.f.heardAt()
		silent := time.Since(heard)
		if pinged.Before(heard) {
			sent = 0
		}
		if silent >= k.cfg.limit() && k.cut {
			k.f.cutFor(fmt.Errorf("%w for %v (%d keepalive PINGs unanswered)", ErrUnresponsive, silent.Round(time.Millisecond), sent))
			return
		}
		if silent < k.cfg.limit() && silent >= time.Duration(sent+1)*k.cfg.Interval {
			// Stamped before it is sent: a PONG read before the stamp
			// would look older than its PING, and the PING unanswered.
			pinged, sent = time.Now(), sent+1
			k.send(pingPacket)
		}
		next := time.Duration(sent+1) * k.cfg.Interval
		if k.cut {
			next = min(next, k.cfg.limit())
		}
		timer.Reset(max(next-time.Since(heard), floor))
	}
}

// KeepAliveOn says the connection speaks libvirt's keepalive: its daemon
// said yes when asked.
func (c *Conn) KeepAliveOn() bool { return c.ka != nil }

// Unresponsive says the daemon has sent nothing, not even an answer to a
// keepalive PING, for the keepalive's limit (DefaultKeepAliveInterval *
// DefaultKeepAliveCount unless set), and since when: its last packet.
// A connection without keepalive, or closed, is never unresponsive.
func (c *Conn) Unresponsive() (since time.Time, ok bool) {
	if c.ka == nil {
		return time.Time{}, false
	}
	select {
	case <-c.done:
		return time.Time{}, false
	default:
	}
	heard := c.ka.f.heardAt()
	if time.Since(heard) < c.ka.cfg.limit() {
		return time.Time{}, false
	}
	return heard, true
}

// LastHeard is when the daemon last sent anything on this connection.
func (c *Conn) LastHeard() time.Time { return c.dialer.conn().heardAt() }
