// Command hostilebench measures what hostile neighbours on the proxy port
// cost a real ferryd in memory: its resident set, sampled every 20 ms, at
// rest and under each load, side by side with the ratio to rest and the
// 128 MiB goal. Not a pass/fail test: the figures are for reading.
//
//	go run ./test/bench/hostilebench   (as root; builds ferryd itself)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/internal/testpki"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

const goalMiB = 128

// checksGoalMiB is what a peer's hostile XML checks may cost at most.
const checksGoalMiB = 256

func main() {
	controls := flag.Int("controls", 64, "control connections a peer holds, each sending 4 MiB of a request it never ends")
	halfOpen := flag.Int("half-open", 2000, "connections that begin a header and never end it, from 63 loopback addresses")
	hold := flag.Duration("hold", 12*time.Second, "how long each load is held while sampling: more than twice the proxy's 5 s header timeout, so refused clients come back")
	flag.Parse()
	if err := run(*controls, *halfOpen, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "hostilebench:", err)
		os.Exit(1)
	}
}

type phase struct {
	name    string
	peakMiB float64
	note    string
	goalMiB float64
}

func run(controls, halfOpen int, hold time.Duration) error {
	dir, err := os.MkdirTemp("", "hostilebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ferryd := filepath.Join(dir, "ferryd")
	build := exec.Command("go", "build", "-o", ferryd, "./cmd/ferryd")
	build.Stdout, build.Stderr, build.Env = os.Stderr, os.Stderr, append(os.Environ(), "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		return fmt.Errorf("building ferryd: %w", err)
	}
	ca, err := testpki.NewCA("hostilebench")
	if err != nil {
		return err
	}
	node := func(name string) *url.URL { return proxy.NodeIdentityURI("ferry", name) }
	self, err := ca.Issue(filepath.Join(dir, "self"), "ferry", node("target"))
	if err != nil {
		return err
	}
	// Enough taken peers to hold every control connection between them,
	// each to its own share.
	var peers []testpki.Files
	for i := 0; i < proxy.MaxControlConns/proxy.MaxControlConnsPerPeer; i++ {
		f, err := ca.Issue(filepath.Join(dir, fmt.Sprintf("peer%d", i)), "ferry", node(fmt.Sprintf("peer%d", i)))
		if err != nil {
			return err
		}
		peers = append(peers, f)
	}
	taken := peers[0]
	stranger, err := ca.Issue(filepath.Join(dir, "stranger"), "ferry") // names no node
	if err != nil {
		return err
	}
	addr, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(ferryd, "--node-name", "target", "--libvirt-socket", filepath.Join(dir, "no-libvirt"),
		"--debug-socket", filepath.Join(dir, "ferry.sock"), "--metrics-addr", "", "--state-dir", filepath.Join(dir, "state"),
		"--proxy-listen", addr, "--proxy-socket-dir", filepath.Join(dir, "mp"), "--qemu-group", "0",
		"--proxy-tls-cert", self.Cert, "--proxy-tls-key", self.Key, "--proxy-tls-ca", self.CA,
		"--proxy-tls-require-node-identity", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := waitPort(addr); err != nil {
		return err
	}
	pid := cmd.Process.Pid

	var phases []phase
	measure := func(name, note string, load func(stop <-chan struct{}) error) error {
		stop := make(chan struct{})
		errc := make(chan error, 1)
		go func() { errc <- load(stop) }()
		peak := 0.0
		for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			peak = max(peak, rssMiB(pid))
		}
		close(stop)
		if err := <-errc; err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		phases = append(phases, phase{name, peak, note, goalMiB})
		time.Sleep(time.Second) // let the connections go
		return nil
	}
	if err := measure("at rest", "", func(<-chan struct{}) error { return nil }); err != nil {
		return err
	}
	if err := measure(fmt.Sprintf("%d control connections, a peer naming no node", controls), "refused before a byte is read",
		func(stop <-chan struct{}) error { return holdControls(addr, []testpki.Files{stranger}, controls, stop) }); err != nil {
		return err
	}
	if err := measure(fmt.Sprintf("%d half-open connections", halfOpen), fmt.Sprintf("%d per address, %d in all, held", proxy.MaxOpeningPerAddr, proxy.MaxOpeningConns),
		func(stop <-chan struct{}) error { return holdHalfOpen(addr, halfOpen, stop) }); err != nil {
		return err
	}
	if err := measure(fmt.Sprintf("%d control connections of %d taken peers", controls, len(peers)), fmt.Sprintf("large ones read %d at a time per peer, %d in all", proxy.MaxReadingPerPeer, proxy.MaxReading),
		func(stop <-chan struct{}) error { return holdControls(addr, peers, controls, stop) }); err != nil {
		return err
	}
	for _, x := range hostileXMLs() {
		if err := measure(fmt.Sprintf("%d prepares of one peer at full rate: %s", controls, x.name), fmt.Sprintf("%d per peer read or checked, 2 checked at a time; goal %d MiB", proxy.MaxControlConnsPerPeer, checksGoalMiB),
			func(stop <-chan struct{}) error { return sendChecks(addr, taken, controls, x.xml, stop) }); err != nil {
			return err
		}
		phases[len(phases)-1].goalMiB = checksGoalMiB
	}
	if err := ping(addr, taken); err != nil {
		return fmt.Errorf("after the loads, the peer's control request: %w", err)
	}
	rest := phases[0].peakMiB
	fmt.Printf("ferryd resident memory under hostile connections (peak of 20 ms samples over %v; goal under %d MiB, %d for XML checks)\n\n", hold, goalMiB, checksGoalMiB)
	fmt.Printf("%-62s %10s %8s %6s  %s\n", "load", "peak MiB", "x rest", "goal", "")
	for _, p := range phases {
		ok := "met"
		if p.peakMiB >= p.goalMiB {
			ok = "MISSED"
		}
		fmt.Printf("%-62s %10.1f %8.2f %6s  %s\n", p.name, p.peakMiB, p.peakMiB/rest, ok, p.note)
	}
	fmt.Println("\nafter the loads a peer's control request is still answered")
	return nil
}

func clientConfig(f testpki.Files) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "ferry", MinVersion: tls.VersionTLS13}, nil
}

// holdControls keeps n control connections, spread over the identities,
// each sending 4 MiB of a prepare request it never ends, opening a new one
// whenever ferryd closes one, until stop.
func holdControls(addr string, ids []testpki.Files, n int, stop <-chan struct{}) error {
	var cfgs []*tls.Config
	for _, f := range ids {
		cfg, err := clientConfig(f)
		if err != nil {
			return err
		}
		cfgs = append(cfgs, cfg)
	}
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	body := append([]byte(`{"op":"prepare","migration":"x","domain":"vm","xml":"`), strings.Repeat("a", peer.MaxControlRequest-100)...)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := tls.Dial("tcp", addr, cfgs[i%len(cfgs)])
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				closed := make(chan struct{})
				go func() {
					select {
					case <-stop:
					case <-closed:
					}
					c.Close()
				}()
				c.Write(hb)
				c.Write(body)
				io.Copy(io.Discard, c) // until ferryd answers and closes, or stop
				close(closed)
			}
		}()
	}
	<-stop
	wg.Wait()
	return nil
}

// holdHalfOpen opens n connections from 63 loopback addresses, each with
// one byte of a header, until stop.
func holdHalfOpen(addr string, n int, stop <-chan struct{}) error {
	var conns []net.Conn
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%63))}, Timeout: time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused past the caps: what they are for
		}
		c.Write([]byte{0x16})
		conns = append(conns, c)
	}
	<-stop
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// ping sends a well-formed control request as the peer and waits for the
// answer (a refusal is an answer: the node has no libvirt here).
func ping(addr string, f testpki.Files) error {
	cfg, err := clientConfig(f)
	if err != nil {
		return err
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	c.Write(hb)
	if err := json.NewEncoder(c).Encode(peer.ControlRequest{Op: peer.OpCancel, Migration: "nothing", Domain: "vm"}); err != nil {
		return err
	}
	var resp peer.ControlResponse
	return json.NewDecoder(c).Decode(&resp)
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitPort(addr string) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("ferryd's proxy never listened on %s", addr)
}

type hostileXML struct {
	name string
	xml  string
}

// hostileXMLs are domain XMLs a peer may send to cost the target the most:
// 2 MiB of attributes inside <metadata> (refused unparsed), and one just
// under the tag and attribute caps (parsed and swept whole).
func hostileXMLs() []hostileXML {
	head := "<domain type='kvm'><name>vm</name><uuid>7c3a2c5e-2b36-4a7b-9d8e-0a4c1b2e3f40</uuid><metadata><f:x xmlns:f='urn:f'"
	var attrs strings.Builder
	for i := 0; attrs.Len() < peer.MaxDomainXML-4096; i++ {
		fmt.Fprintf(&attrs, " a%d=''", i)
	}
	var under strings.Builder
	for i := 0; i < 9000; i++ {
		fmt.Fprintf(&under, "<f:e a%d=''/>", i)
	}
	for i := 0; i < 10000; i++ {
		under.WriteString("<f:t/>")
	}
	return []hostileXML{
		{"2 MiB of attributes", head + attrs.String() + "/></metadata></domain>"},
		{"just under the caps", head + ">" + under.String() + "</f:x></metadata></domain>"},
	}
}

// sendChecks keeps n prepares of one peer carrying xml going, each sent
// again as soon as it is answered, until stop.
func sendChecks(addr string, id testpki.Files, n int, xml string, stop <-chan struct{}) error {
	var answers sync.Map
	cfg, err := clientConfig(id)
	if err != nil {
		return err
	}
	hb, _ := peer.Header{Kind: peer.KindControl}.Encode()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := tls.Dial("tcp", addr, cfg)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				c.Write(hb)
				json.NewEncoder(c).Encode(peer.ControlRequest{Op: peer.OpPrepare, Migration: fmt.Sprintf("h%d-%d", i, j), Domain: "vm", XML: xml})
				var resp peer.ControlResponse
				json.NewDecoder(c).Decode(&resp)
				c.Close()
				answers.Store(resp.Reason+": "+resp.Error, true)
			}
		}()
	}
	<-stop
	wg.Wait()
	answers.Range(func(k, _ any) bool {
		if s := k.(string); len(s) > 160 {
			k = s[:160] + "..."
		}
		fmt.Printf("  answered: %s\n", k)
		return true
	})
	return nil
}
