package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// Ports in the namespaces; every run starts fresh processes on them.
const (
	sinkPort        = 7000 // raw TCP's sink
	controlPort     = 7001 // the sink's confirmation to the writer
	relayPort       = 7002 // the target-side relay of every relayed variant
	ferrySourcePort = 7003 // the source Ferry's own proxy port, unused by the stream
)

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// variant is one way of moving the stream from ns A to ns B.
type variant struct {
	key, name string
	conns     int
	// baseline is the key of the KubeVirt-style variant this one is
	// compared with: the same transport security and connection count.
	baseline string
	// setup starts the relays, target side first, each ready when it
	// returns.
	setup func(b *bench) (plan, error)
}

// plan is where one run's writer and sink connect, and the relays whose CPU
// is measured.
type plan struct {
	writeTo, sinkAt string
	source, target  *child // nil without relays
}

func variants(parallel int) []variant {
	vs := []variant{
		{key: "raw", name: "raw TCP", conns: 1, baseline: "kubevirt", setup: setupRaw},
		{key: "socat", name: "socat", conns: 1, baseline: "kubevirt", setup: setupSocat},
		{key: "kubevirt", name: "kubevirt-style", conns: 1, baseline: "kubevirt", setup: setupKubeVirt(false)},
		{key: "ferry", name: "ferry plain", conns: 1, baseline: "kubevirt", setup: setupFerry(false)},
		{key: "kubevirt-tls", name: "kubevirt-style+TLS", conns: 1, baseline: "kubevirt-tls", setup: setupKubeVirt(true)},
		{key: "ferry-tls", name: "ferry mTLS", conns: 1, baseline: "kubevirt-tls", setup: setupFerry(true)},
	}
	if parallel > 1 {
		x := fmt.Sprintf(" x%d", parallel)
		vs = append(vs,
			variant{key: "kubevirt-par", name: "kubevirt-style" + x, conns: parallel, baseline: "kubevirt-par", setup: setupKubeVirt(false)},
			variant{key: "ferry-par", name: "ferry plain" + x, conns: parallel, baseline: "kubevirt-par", setup: setupFerry(false)})
	}
	return vs
}

func setupRaw(*bench) (plan, error) {
	at := "tcp:" + hostPort(ipB, sinkPort)
	return plan{writeTo: at, sinkAt: at}, nil
}

// startPair starts the target relay, waits for its port, then the source
// relay and its socket.
func startPair(b *bench, target, source []string, sourceSocket string) (plan, error) {
	var p plan
	var err error
	if p.target, err = b.start(nsB, "target relay", target...); err != nil {
		return p, err
	}
	if err := p.target.waitListening("tcp", hostPort(ipB, relayPort)); err != nil {
		return p, err
	}
	if p.source, err = b.start(nsA, "source relay", source...); err != nil {
		return p, err
	}
	if err := p.source.waitListening("unix", sourceSocket); err != nil {
		return p, err
	}
	p.writeTo = "unix:" + sourceSocket
	return p, nil
}

func setupSocat(b *bench) (plan, error) {
	sink := b.sock("sink.sock")
	src := b.sock("source.sock")
	p, err := startPair(b,
		[]string{"socat", fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", relayPort, ipB), "UNIX-CONNECT:" + sink},
		[]string{"socat", "UNIX-LISTEN:" + src + ",fork", "TCP:" + hostPort(ipB, relayPort)},
		src)
	p.sinkAt = "unix:" + sink
	return p, err
}

func setupKubeVirt(withTLS bool) func(*bench) (plan, error) {
	return func(b *bench) (plan, error) {
		sink := b.sock("sink.sock")
		src := b.sock("source.sock")
		target := []string{b.exe, "kv-target", "-listen", hostPort(ipB, relayPort), "-target", sink}
		source := []string{b.exe, "kv-source", "-listen", src, "-target", hostPort(ipB, relayPort)}
		if withTLS {
			target = append(target, "-tls", b.tlsDir)
			source = append(source, "-tls", b.tlsDir)
		}
		p, err := startPair(b, target, source, src)
		p.sinkAt = "unix:" + sink
		return p, err
	}
}

// setupFerry gives each node its own socket dir, as on real nodes.
func setupFerry(withTLS bool) func(*bench) (plan, error) {
	return func(b *bench) (plan, error) {
		dirA, dirB := b.sock("ferry-a"), b.sock("ferry-b")
		target := []string{b.exe, "ferry-target", "-listen", hostPort(ipB, relayPort), "-dir", dirB}
		source := []string{b.exe, "ferry-source", "-listen", hostPort(ipA, ferrySourcePort), "-dir", dirA, "-target", hostPort(ipB, relayPort)}
		if withTLS {
			target = append(target, "-tls", b.tlsDir)
			source = append(source, "-tls", b.tlsDir)
		}
		p, err := startPair(b, target, source, proxy.SocketPath(dirA, benchMigration, peer.KindMemory))
		p.sinkAt = "unix:" + proxy.TargetSocketPath(dirB, benchMigration, peer.KindMemory)
		return p, err
	}
}

func (b *bench) sock(name string) string { return filepath.Join(b.sockDir, name) }
