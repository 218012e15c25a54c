//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-vm/ferry/test/testbed"
)

// plainHost runs argv in private mount and network namespaces that look
// like a stock libvirt host: node a's libvirtd at the default socket path,
// and nothing of Ferry's (no /run/ferry, /var/lib, /etc/ferry, kubelet).
func plainHost(t *testing.T, logPath string, argv ...string) *exec.Cmd {
	t.Helper()
	script := `set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/libvirt && touch /run/libvirt/libvirt-sock
mount --bind "$NODE_LIBVIRT" /run/libvirt/libvirt-sock
mount -t tmpfs tmpfs /var/lib
if [ -d /etc/ferry ]; then mount -t tmpfs tmpfs /etc/ferry; fi
ip link set lo up
exec "$@"
`
	cmd := exec.Command("unshare", append([]string{"-m", "-n", "--propagation", "private", "sh", "-c", script, "sh"}, argv...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NODE_LIBVIRT=" + bed.Node("a").LibvirtSocket}
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd
}

// TestFerrydWithNoFlagsObserves: on a plain libvirt host ferryd needs no
// flag: it watches the system libvirtd, serves the debug socket and
// /metrics at their defaults, and leaves the proxy off.
func TestFerrydWithNoFlagsObserves(t *testing.T) {
	guest(t, testbed.GuestSpec{Name: "plain", MemoryMiB: 256, DirtyMiB: 16, DirtyRateMiBs: -1})
	ferryd := filepath.Join(filepath.Dir(ferryctlBin), "ferryd")
	logPath := filepath.Join(t.TempDir(), "ferryd.log")
	cmd := plainHost(t, logPath, ferryd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		<-exited
	}()
	pid := cmd.Process.Pid
	ctl := func(args ...string) ([]byte, error) {
		// No --socket: ferryctl's default is ferryd's.
		return exec.Command("nsenter", append([]string{"-t", fmt.Sprint(pid), "-m", "-n", "--", ferryctlBin, "-o", "json"}, args...)...).Output()
	}
	var doms struct {
		Domains []struct {
			Name, State string
		} `json:"domains"`
		Libvirt []struct {
			Socket string `json:"socket"`
			Up     bool   `json:"up"`
		} `json:"libvirt"`
	}
	waitFor(t, "ferryd with no flags to see guest plain through the default libvirt socket", 30*time.Second, func() bool {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("ferryd with no flags exited: %v\n%s", err, log)
		default:
		}
		out, err := ctl("domains")
		if err != nil || json.Unmarshal(out, &doms) != nil {
			return false
		}
		for _, d := range doms.Domains {
			if d.Name == "plain" && d.State == "running" {
				return true
			}
		}
		return false
	})
	if len(doms.Libvirt) != 1 || doms.Libvirt[0].Socket != "/run/libvirt/libvirt-sock" || !doms.Libvirt[0].Up {
		t.Errorf("libvirt sockets %+v, want the system libvirtd's, up", doms.Libvirt)
	}
	var proxy struct {
		Enabled bool `json:"enabled"`
	}
	if out, err := ctl("proxy"); err != nil || json.Unmarshal(out, &proxy) != nil || proxy.Enabled {
		t.Errorf("ferryctl proxy: %s %v: the proxy must be off unless asked for", out, err)
	}

	body := metricsInNetns(t, pid, "127.0.0.1:9474")
	for _, want := range []string{`ferry_libvirt_up{node="`, `socket="/run/libvirt/libvirt-sock"} 1`, "ferry_build_info"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics on the default :9474 lacks %q", want)
		}
	}
	if strings.Contains(body, "ferry_proxy_") {
		t.Errorf("/metrics has proxy series with the proxy off")
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "migration proxy off") {
		t.Errorf("the log does not say the proxy is off:\n%s", log)
	}
}

// TestFerrydProxyWithoutCertificatesRefuses: asked for, the proxy needs its
// certificates, and ferryd says which file is missing.
func TestFerrydProxyWithoutCertificatesRefuses(t *testing.T) {
	ferryd := filepath.Join(filepath.Dir(ferryctlBin), "ferryd")
	logPath := filepath.Join(t.TempDir(), "ferryd.log")
	cmd := plainHost(t, logPath, ferryd, "--proxy-listen", ":9475")
	err := cmd.Run()
	log, _ := os.ReadFile(logPath)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("ferryd --proxy-listen without certificates: %v, want exit 2\n%s", err, log)
	}
	if !strings.Contains(string(log), "proxy TLS file: stat /etc/ferry/tls/tls.crt") {
		t.Errorf("the refusal does not name the missing certificate:\n%s", log)
	}
}

// dialInNetns connects to addr from inside the network namespace of pid:
// the connection is made from a thread moved into it.
func dialInNetns(t *testing.T, pid int, addr string) net.Conn {
	t.Helper()
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread goes back to its own namespace before it is unlocked.
		// A thread left locked would be discarded when this goroutine
		// ends, and a child forked from it with Pdeathsig (the tests'
		// kube-apiserver) would be killed with it.
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer own.Close()
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if rerr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); rerr == nil {
			// Home again: the thread may serve other goroutines.
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("connecting to %s in the namespace of pid %d: %v", addr, pid, r.err)
	}
	return r.conn
}

// metricsInNetns scrapes addr inside the network namespace of pid.
func metricsInNetns(t *testing.T, pid int, addr string) string {
	t.Helper()
	conn := dialInNetns(t, pid, addr)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}
