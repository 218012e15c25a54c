package main

import (
	"context"
	"flag"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-vm/ferry/metrics"
	"github.com/ferry-vm/ferry/peer"
	"github.com/ferry-vm/ferry/proxy"
)

// benchMigration is the migration id both Ferry proxies agree on.
const benchMigration = "proxybench"

type ferryFlags struct {
	listen, dir, tlsDir string
}

func (f *ferryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "the proxy port, host:port")
	fs.StringVar(&f.dir, "dir", "", "the proxy's socket dir")
	fs.StringVar(&f.tlsDir, "tls", "", "directory with tls.crt, tls.key and ca.crt; empty for plain TCP")
}

func (f *ferryFlags) proxy() (*proxy.Proxy, error) {
	// Counting as ferryd does: the counters are part of the relay's cost.
	cfg := proxy.Config{Listen: f.listen, SocketDir: f.dir, Metrics: proxy.Metrics(metrics.NewProxy(prometheus.NewRegistry()))}
	if f.tlsDir != "" {
		files := tlsFiles(f.tlsDir)
		cfg.TLS = &files
	}
	return proxy.New(cfg)
}

// ferryTargetMain is the target node's proxy with the bench migration's
// memory stream registered; the sink listens at the registered socket.
func ferryTargetMain(args []string) error {
	var f ferryFlags
	fs := flag.NewFlagSet("ferry-target", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := profileRelay("ferry-target"); err != nil {
		return err
	}
	p, err := f.proxy()
	if err != nil {
		return err
	}
	// Registered before the port opens, since the orchestrator takes an
	// open port as "ready"; as many connections as any variant opens.
	if _, err := p.Register(benchMigration, "bench", peer.MaxParallel, false); err != nil {
		return err
	}
	if _, err := p.Listen(); err != nil {
		return err
	}
	return p.Serve(context.Background())
}

// ferrySourceMain is the source node's proxy with the bench migration's
// memory socket open, relaying to the target node's proxy.
func ferrySourceMain(args []string) error {
	var f ferryFlags
	fs := flag.NewFlagSet("ferry-source", flag.ContinueOnError)
	f.register(fs)
	target := fs.String("target", "", "the target proxy's host:port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := profileRelay("ferry-source"); err != nil {
		return err
	}
	p, err := f.proxy()
	if err != nil {
		return err
	}
	if _, err := p.Listen(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Serve(context.Background()) }()
	// The bench's "QEMU" runs as root, as every process here does.
	if _, err := p.OpenSource(benchMigration, *target, []peer.Kind{peer.KindMemory}, 0, 0); err != nil {
		return err
	}
	return <-errc
}
