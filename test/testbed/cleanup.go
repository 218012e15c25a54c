package testbed

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

// cleanup stops every process recorded in cfg.Dir and removes the
// namespaces. It must cope with any partial state a crash can leave.
func cleanup(ctx context.Context, cfg Config) error {
	var st state
	if err := readJSON(statePath(cfg.Dir), &st); err != nil && !errors.Is(err, errNoState) {
		logf(cfg.Log, "ignoring unreadable state: %v", err)
	}
	relays := loadRelays(cfg.Dir)
	if st.Nodes != nil || len(relays) > 0 || netnsExists(nodeDefs[0].netns) || netnsExists(nodeDefs[1].netns) {
		logf(cfg.Log, "stopping the bed in %s", cfg.Dir)
	}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var wg sync.WaitGroup
	for _, d := range nodeDefs {
		if n := st.Nodes[d.name]; n != nil && n.Libvirtd.alive() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// go-libvirt has no call timeouts; a wedged libvirtd is killed next anyway.
				done := make(chan struct{})
				go func() { destroyAllDomains(newNode(cfg, d).LibvirtSocket); close(done) }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					logf(cfg.Log, "libvirtd on %s did not destroy its domains in 20s", d.name)
				}
			}()
		}
	}
	wg.Wait()
	for _, r := range relays {
		keep(stopRelays(r))
		_ = os.Remove(relayPath(cfg.Dir, r.Guest))
	}
	for _, p := range st.Prometheus {
		keep(p.stop(10 * time.Second))
	}
	for _, p := range st.KubeRelays {
		keep(p.stop(5 * time.Second))
	}
	for _, d := range nodeDefs {
		n := st.Nodes[d.name]
		if n == nil {
			n = &nodeState{}
		}
		keep(n.Ferryd.stop(10 * time.Second))
		keep(n.Libvirtd.stop(15 * time.Second))
		// A libvirtd whose PID never reached the state file still wrote its pidfile.
		dir := filepath.Join(cfg.Dir, d.name)
		conf := filepath.Join(dir, "etc", "libvirtd.conf")
		if p, ok := pidFileProc(filepath.Join(dir, "run", "libvirtd.pid"), "libvirtd", conf); ok {
			keep(p.stop(15 * time.Second))
		}
		// QEMU outlives libvirtd; its pidfiles are the only record of it.
		pidfiles, _ := filepath.Glob(filepath.Join(dir, "run", "libvirt", "qemu", "*.pid"))
		for _, pf := range pidfiles {
			guest := strings.TrimSuffix(filepath.Base(pf), ".pid")
			if p, ok := pidFileProc(pf, "qemu-system", "guest="+guest); ok {
				logf(cfg.Log, "stopping leftover QEMU of %s on %s (pid %d)", guest, d.name, p.PID)
				keep(p.stop(5 * time.Second))
			}
		}
		keep(n.Holder.stop(5 * time.Second))
		ferryd := ""
		if st.FerrydBin != "" {
			ferryd = filepath.Base(st.FerrydBin)
			if len(ferryd) > 15 { // comm is truncated
				ferryd = ferryd[:15]
			}
		}
		for _, p := range strayProcs(d.netns, ferryd) {
			logf(cfg.Log, "stopping unrecorded %s (pid %d) in %s", strings.Join(p.cmdline(), " "), p.PID, d.netns)
			keep(p.stop(5 * time.Second))
		}
	}
	keep(removeLeftoverPodCgroups())
	keep(deleteNetwork(ctx))
	_ = os.Remove(statePath(cfg.Dir))
	return errors.Join(errs...)
}

// pidFileProc trusts a pidfile only if the process's command line still
// looks like the one that wrote it.
func pidFileProc(path, argv0Contains, argContains string) (proc, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return proc{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return proc{}, false
	}
	p, err := procOf(pid)
	if err != nil {
		return proc{}, false
	}
	argv := p.cmdline()
	if len(argv) == 0 || !strings.Contains(filepath.Base(argv[0]), argv0Contains) {
		return proc{}, false
	}
	for _, a := range argv[1:] {
		if strings.Contains(a, argContains) {
			return p, true
		}
	}
	return proc{}, false
}

func destroyAllDomains(sock string) {
	l, err := dialLibvirt(sock, 5*time.Second)
	if err != nil {
		return
	}
	defer l.Disconnect()
	doms, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, d := range doms {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.DomainDestroy(d) }()
	}
	wg.Wait()
}
