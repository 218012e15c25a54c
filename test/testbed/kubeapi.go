package testbed

import (
	"fmt"
	"os"
	"path/filepath"
)

// NodeAPIAddr is where an exposed API server answers inside every node.
const NodeAPIAddr = "127.0.0.1:6443"

// ExposeAPIServer makes an API server listening on the host's loopback
// (hostAddr) reachable at NodeAPIAddr inside both nodes, whose loopbacks
// are their own: a relay in each node's network namespace crosses to the
// host through a unix socket in the bed's directory, which both see.
func (b *Bed) ExposeAPIServer(hostAddr string) (string, error) {
	sock := filepath.Join(b.cfg.Dir, "kube-api.sock")
	os.Remove(sock)
	var procs []proc
	p, err := spawn(filepath.Join(b.cfg.Dir, "kube-relay-host.log"), "socat", "UNIX-LISTEN:"+sock+",fork,unlink-early", "TCP:"+hostAddr)
	if err != nil {
		return "", err
	}
	procs = append(procs, p)
	for _, d := range nodeDefs {
		p, err := spawn(filepath.Join(b.cfg.Dir, d.name, "kube-relay.log"), "nsenter", "--net=/run/netns/"+d.netns,
			"socat", "TCP-LISTEN:6443,bind=127.0.0.1,fork,reuseaddr", "UNIX-CONNECT:"+sock)
		if err != nil {
			return "", err
		}
		procs = append(procs, p)
	}
	b.mu.Lock()
	b.st.KubeRelays = append(b.st.KubeRelays, procs...)
	b.mu.Unlock()
	if err := b.save(); err != nil {
		return "", err
	}
	return fmt.Sprintf("https://%s", NodeAPIAddr), nil
}
