package libvirtx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx/libvirtxtest"
)

// be32 and be64 lay out XDR words, for packets made by hand.
var be32 = libvirtxtest.Words

func be64(v uint64) []byte { return new(libvirtxtest.XDR).U64(v).Bytes() }

func header(prog, proc, typ, status uint32) []byte {
	return be32(prog, 1, proc, typ, 7, status)
}

// checkOwn checks p as the answer to a call of the procedure its header
// names, waiting on its serial (7).
func checkOwn(p []byte) error {
	var c rpcCalls
	if len(p) >= 12 {
		c.expect(7, binary.BigEndian.Uint32(p[8:12]))
	}
	return checkPacket(p, &c)
}

func xdrString(s string) []byte { return new(libvirtxtest.XDR).String(s).Bytes() }

func domainXDR(name string) []byte {
	return new(libvirtxtest.XDR).Domain(name, libvirt.UUID{}, 1).Bytes()
}

func TestCheckPacketPassesWhatLibvirtSends(t *testing.T) {
	jobStats := append(be32(2, 3), xdrString("memory_total")...)
	jobStats = append(append(jobStats, be32(4)...), be64(1<<30)...)
	jobStats = append(append(jobStats, xdrString("compression_method")...), be32(7)...)
	jobStats = append(jobStats, xdrString("xbzrle")...)
	jobStats = append(append(jobStats, xdrString("downtime_net")...), be32(5)...)
	jobStats = append(jobStats, be64(0)...)
	allStats := append(be32(2), domainXDR("default_vm")...)
	allStats = append(append(allStats, be32(1)...), xdrString("state.state")...)
	allStats = append(append(allStats, be32(1, 1)...), domainXDR("other")...)
	allStats = append(allStats, be32(0)...)
	for name, p := range map[string][]byte{
		"job stats":        append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), jobStats...),
		"all domain stats": append(header(rpcRemoteProgram, 344, rpcReply, rpcStatusOK), allStats...),
		"error":            append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusError), libvirtxtest.ErrorBody(libvirt.Error{Code: 42, Message: "no domain"})...),
		"lifecycle event":  append(append(header(rpcRemoteProgram, 318, rpcMessage, rpcStatusOK), be32(1)...), append(domainXDR("vm"), be32(5, 3)...)...),
		"finish3":          append(append(header(rpcRemoteProgram, 306, rpcReply, rpcStatusOK), domainXDR("vm")...), be32(0)...),
		"prepare3":         append(header(rpcRemoteProgram, 303, rpcReply, rpcStatusOK), be32(0, 1, 3, 0x75726900)...),
	} {
		if err := checkOwn(p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, p := range map[string][]byte{
		"QEMU monitor event": header(0x20008087, 6, rpcMessage, rpcStatusOK),
		"keepalive ping":     header(0x6b656570, 1, rpcMessage, rpcStatusOK),
		"unsubscribed event": header(rpcRemoteProgram, 346, rpcMessage, rpcStatusOK),
		// go-libvirt decodes 346 as a tunable event whatever else it says.
		"an event dressed as an error": append(header(rpcRemoteProgram, 346, rpcReply, rpcStatusError), be32(1, 10, 1, 0, 0, 0x7fffffff)...),
	} {
		if err := checkPacket(p, &rpcCalls{}); !errors.Is(err, errDropPacket) {
			t.Errorf("%s: %v, want it dropped", name, err)
		}
	}
}

// Each of these would have go-libvirt allocate what it claims.
// go-libvirt decodes an answer as the reply to the call waiting on its
// serial, whatever procedure its header names: a job-stats call answered
// as "connect close" with 2^31-1 parameters behind it is walked as job
// stats, and refused.
func TestAnAnswerIsCheckedAsTheCallItAnswers(t *testing.T) {
	var c rpcCalls
	c.expect(7, 298)
	p := append(header(rpcRemoteProgram, 2, rpcReply, rpcStatusOK), be32(0, 0x7fffffff)...)
	if err := checkPacket(p, &c); err == nil || errors.Is(err, errDropPacket) {
		t.Fatalf("an answer naming another procedure: %v, want refused", err)
	}
	// An answer no call waits for is dropped, as go-libvirt would.
	if err := checkPacket(append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), be32(0, 0)...), &c); !errors.Is(err, errDropPacket) {
		t.Fatalf("an answer to no call: %v, want it dropped", err)
	}
	// The calls are read from what go-libvirt writes, cut anywhere.
	var w rpcCalls
	call := append(be32(28+8), be32(rpcRemoteProgram, 1, 298, 0, 41, 0)...)
	call = append(call, be32(0, 0)...)
	stream := append(append([]byte{}, call...), call...)
	binary.BigEndian.PutUint32(stream[len(call)+20:], 42)
	for i := 0; i < len(stream); i += 5 {
		w.written(stream[i:min(i+5, len(stream))])
	}
	for _, serial := range []uint32{41, 42} {
		if proc, ok := w.take(serial); !ok || proc != 298 {
			t.Errorf("call %d: %d %v, want procedure 298", serial, proc, ok)
		}
	}
}

func TestCheckPacketRefusesWhatDoesNotFit(t *testing.T) {
	for name, tc := range map[string]struct {
		p    []byte
		want string
	}{
		"2^31-1 job stats":           {append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), be32(0, 0x7fffffff)...), "over libvirt's limit of 64"},
		"64 job stats in 8 bytes":    {append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), be32(0, 64, 0)...), "claims 64 elements in 4 bytes"},
		"4 GiB capabilities":         {append(header(rpcRemoteProgram, 7, rpcReply, rpcStatusOK), be32(0xffffffff)...), "over libvirt's limit"},
		"XML longer than the packet": {append(header(rpcRemoteProgram, 14, rpcReply, rpcStatusOK), be32(100, 0)...), "needs 100 bytes, 4 left"},
		"10^6 domain records":        {append(header(rpcRemoteProgram, 344, rpcReply, rpcStatusOK), be32(1000000)...), "over libvirt's limit of 16384"},
		"error message of 1 GiB":     {append(header(rpcRemoteProgram, 1, rpcReply, rpcStatusError), be32(1, 10, 1, 1<<30)...), "over libvirt's limit"},
		"event with 2^31-1 params":   {append(append(header(rpcRemoteProgram, 363, rpcMessage, rpcStatusOK), be32(1)...), append(domainXDR("vm"), be32(0x7fffffff)...)...), "typed parameters"},
		"reply to a call never made": {header(rpcRemoteProgram, 400, rpcReply, rpcStatusOK), "Ferry never calls"},
		"typed param of type 9":      {append(append(header(rpcRemoteProgram, 298, rpcReply, rpcStatusOK), be32(0, 1)...), append(xdrString("x"), be32(9, 0)...)...), "unknown type 9"},
		"another program's reply":    {header(0x11111111, 1, rpcReply, rpcStatusOK), "program 0x11111111"},
		"a call from the server":     {header(rpcRemoteProgram, 1, 0, rpcStatusOK), "type 0"},
		"short header":               {be32(rpcRemoteProgram, 1), "needs 4 bytes"},
	} {
		err := checkOwn(tc.p)
		if err == nil || errors.Is(err, errDropPacket) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, tc.want)
		}
	}
}

// hostileJobStats answers a job-stats call with 16 bytes claiming 2^31-1
// parameters: what crashed ferryd with a fatal out-of-memory.
func hostileJobStats(proc uint32, _ []byte) ([]byte, *libvirt.Error, bool) {
	if proc == libvirtxtest.ProcDomainGetJobStats {
		return be32(0, 0x7fffffff, 0, 0), nil, true
	}
	return nil, nil, false
}

// The hostile reply is sent to a child process held to 4 GiB of address
// space: a regression shows as that child dying of "out of memory", not as
// this test binary dying.
func TestHostileReplyIsRefusedUnderAMemoryLimit(t *testing.T) {
	if os.Getenv("FERRY_HOSTILE_CHILD") == "1" {
		hostileChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileReplyIsRefusedUnderAMemoryLimit$", "-test.v")
	cmd.Env = append(os.Environ(), "FERRY_HOSTILE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused:") {
		t.Fatalf("the child did not see a refusal (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "over libvirt's limit of 64") {
		t.Errorf("the refusal does not say what was wrong:\n%s", out)
	}
}

func hostileChild() {
	if !raceEnabled {
		// The race detector reserves terabytes of address space up front.
		lim := syscall.Rlimit{Cur: 4 << 30, Max: 4 << 30}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
			fmt.Println("setrlimit:", err)
			os.Exit(3)
		}
	}
	t := &testing.T{}
	f := libvirtxtest.New(t, "")
	f.SetDomains(libvirtxtest.Domain{Name: "vm", State: int32(StateRunning)})
	f.Answer(hostileJobStats)
	c, err := Dial(context.Background(), f.Path(), 2*time.Second)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(3)
	}
	_, err = c.JobStats(context.Background(), libvirt.Domain{Name: "vm"}, false)
	if err == nil {
		fmt.Println("no error from a hostile job-stats reply")
		os.Exit(3)
	}
	fmt.Println("refused:", err)
	// The connection is dropped, not poisoned: a new one works.
	f.Answer(nil)
	c2, err := Dial(context.Background(), f.Path(), 2*time.Second)
	if err == nil {
		_, err = c2.JobStats(context.Background(), libvirt.Domain{Name: "vm"}, false)
	}
	if err != nil {
		fmt.Println("a fresh connection failed:", err)
		os.Exit(3)
	}
}
