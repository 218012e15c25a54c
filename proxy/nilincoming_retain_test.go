package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// A ferryd with no libvirt socket (one watching a glob, KubeVirt's one
// libvirt per pod) has no Incoming. A source asks it again for the finish
// of a migration an earlier ferryd of the node recorded: it hears "not
// settled, ask again", and ferryd does not crash on a nil Incoming.
func TestARepeatedFinishIsAnsweredWithNoIncoming(t *testing.T) {
	outcomes := t.TempDir()
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: shortTempDir(t), OutcomeDir: outcomes,
		HeaderTimeout: time.Second, DialTimeout: time.Second, Metrics: testMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"id":"left","owner":"","domain":"vm","prepared":"2026-12-01T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(outcomes, "left.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, other := net.Pipe()
	defer raw.Close()
	defer other.Close()
	resp := p.finish(raw, raw, peer.ControlRequest{Op: peer.OpFinish, Migration: "left", Domain: "vm"}, Peer{Plain: "10.0.0.1"})
	if resp.Reason != peer.ReasonRestarted {
		t.Fatalf("answered %+v; want the restarted refusal (ask again)", resp)
	}
}

// refusingIncoming refuses every Prepare, as a target does a domain that
// already runs there, keeping nothing of what it is given.
type refusingIncoming struct{ *fakeIncoming }

func (refusingIncoming) Prepare(context.Context, peer.IncomingMigration, string, []byte) ([]byte, error) {
	return nil, &peer.Refusal{Reason: "domain_exists", Msg: "domain already runs on this node"}
}

// The registry keeps an ended migration ten minutes, and with it what it
// points at: never the request it came in, whose domain XML may be 2 MiB.
func TestRefusedPreparesDoNotKeepTheirXML(t *testing.T) {
	src, dst := startNode(t, nil), startNodeWith(t, Config{Incoming: refusingIncoming{newFakeIncoming()}})
	big := strings.Replace(testXML, "</domain>", "<description>"+strings.Repeat("x", 1<<20)+"</description></domain>", 1)
	heapMiB := func() float64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc) / (1 << 20)
	}
	before := heapMiB()
	const n = 40
	for i := range n {
		resp, err := src.p.Control(context.Background(), dst.addr, peer.ControlRequest{Op: peer.OpPrepare, Migration: fmt.Sprintf("r%d", i), Domain: "vm",
			XML: big, Cookie: []byte("begin"), Flags: 1})
		if resp.Reason != "domain_exists" {
			t.Fatalf("prepare %d: %+v, %v; want refused", i, resp, err)
		}
	}
	if grew := heapMiB() - before; grew > n/2 {
		t.Fatalf("refused prepares keep their domain XML: the heap grew %.1f MiB for %d ended migrations of a 1 MiB XML", grew, n)
	}
}
