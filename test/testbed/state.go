package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// state is what `up` leaves in Dir so that other processes (the CLI's other
// verbs) and a later cleanup can find every process the bed started.
type state struct {
	Accel       string `json:"accel"`
	AccelReason string `json:"accel_reason,omitempty"`
	CacheDir    string `json:"cache_dir"`
	FerrydBin   string `json:"ferryd_bin,omitempty"`
	// PlainProxy runs the ferryds' proxies without TLS.
	PlainProxy bool `json:"plain_proxy,omitempty"`
	// QEMUGID is the group the nodes' libvirtd run QEMU with, which the
	// relays' sockets are given to.
	QEMUGID int `json:"qemu_gid"`
	// KubeRelays carry an API server on the host's loopback into the nodes.
	KubeRelays []proc `json:"kube_relays,omitempty"`
	// Prometheus is the bed's Prometheus server and its API relay.
	Prometheus []proc `json:"prometheus,omitempty"`
	// FerrydArgs are extra ferryd flags (e.g. a kubeconfig) for both nodes.
	FerrydArgs []string `json:"ferryd_args,omitempty"`
	// FerrydOwnArgs, when set, replace the flags the bed gives ferryd
	// (its libvirt socket, proxy, certificates, state dir): a deployment's
	// own arguments, $(NODE_NAME) standing for the node.
	FerrydOwnArgs []string `json:"ferryd_own_args,omitempty"`
	// FerrydCaps, with FerrydOwnArgs, are the only capabilities ferryd
	// keeps (root's others are dropped from its bounding set), as a
	// container's securityContext leaves them.
	FerrydCaps []string              `json:"ferryd_caps,omitempty"`
	Nodes      map[string]*nodeState `json:"nodes"`
	Ready      bool                  `json:"ready"`
}

type nodeState struct {
	Holder   proc `json:"holder"`
	Libvirtd proc `json:"libvirtd"`
	Ferryd   proc `json:"ferryd"`
	// Stack is the libvirt and QEMU the node runs (stack.go).
	Stack string `json:"stack,omitempty"`
	// FerrydArgs are extra ferryd flags for this node only, after the
	// bed-wide ones (so they win where both set a flag).
	FerrydArgs []string `json:"ferryd_args,omitempty"`
}

// relayState records one migration's relays, written before they start so
// a crash can never leave an unrecorded socat behind.
type relayState struct {
	Guest   string `json:"guest"`
	From    string `json:"from"`
	To      string `json:"to"`
	RPCPort int    `json:"rpc_port"`
	MigPort int    `json:"mig_port"`
	Procs   []proc `json:"procs"`
}

// guestState remembers where a guest's console output went, in order, so
// Console can stitch the per-node console files back together.
type guestState struct {
	Name     string    `json:"name"`
	Segments []segment `json:"segments"`
}

// segment: from Offset in Node's console file until the next segment on the same node.
type segment struct {
	Node   string `json:"node"`
	Offset int64  `json:"offset"`
}

var errNoState = errors.New("no test bed state")

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

func relayPath(dir, guest string) string {
	return filepath.Join(dir, "relays", guest+".json")
}

func guestPath(dir, guest string) string {
	return filepath.Join(dir, "guests", guest+".json")
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return errNoState
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON replaces path atomically so a crash mid-write leaves the old content.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// withLock serialises read-modify-write of the bed's files across processes.
func withLock(dir string, fn func() error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn()
}

func loadRelays(dir string) []*relayState {
	paths, _ := filepath.Glob(filepath.Join(dir, "relays", "*.json"))
	var out []*relayState
	for _, p := range paths {
		var r relayState
		if readJSON(p, &r) == nil {
			out = append(out, &r)
		}
	}
	return out
}

// nodeState reads the node's processes afresh: another process holding a
// Bed for the same Dir (the CLI) may have restarted one of them.
func (b *Bed) nodeState(node string) *nodeState {
	b.reload()
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.st.Nodes[node]; n != nil {
		c := *n
		return &c
	}
	return nil
}

func (b *Bed) reload() {
	var st state
	if readJSON(statePath(b.cfg.Dir), &st) == nil && st.Nodes != nil {
		b.mu.Lock()
		b.st = &st
		b.mu.Unlock()
	}
}

// setProc records a process before anything can fail, so cleanup finds it.
func (b *Bed) setProc(node string, fn func(*nodeState)) {
	err := withLock(b.cfg.Dir, func() error {
		var st state
		b.mu.Lock()
		defer b.mu.Unlock()
		// Up writes the first state file; afterwards the file is the truth.
		if b.st.Ready && readJSON(statePath(b.cfg.Dir), &st) == nil && st.Nodes != nil {
			b.st = &st
		}
		n := b.st.Nodes[node]
		if n == nil {
			n = &nodeState{}
			b.st.Nodes[node] = n
		}
		fn(n)
		return writeJSON(statePath(b.cfg.Dir), b.st)
	})
	if err != nil {
		logf(b.cfg.Log, "saving state: %v", err)
	}
}

func (b *Bed) save() error {
	return withLock(b.cfg.Dir, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		return writeJSON(statePath(b.cfg.Dir), b.st)
	})
}
