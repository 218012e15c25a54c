// Package neighbour runs a test's own binary again as a process of another
// user: a sibling QEMU of the node's QEMU uid, an unprivileged local user.
// Attacks by neighbours are about processes and their credentials, which
// one process cannot show on its own behalf; the kernel's view of a real
// second process is what the code under test reads.
//
// A test package calls Main first thing in its TestMain; Start runs one
// role and returns once the neighbour is ready.
package neighbour

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/testenv"
)

const envRole = "FERRY_NEIGHBOUR_ROLE"

// QEMUUid is the uid (and gid) the tests give every "QEMU" of a node, as
// Debian's libvirt-qemu user is numbered; without sVirt all QEMUs share it.
const QEMUUid = 64055

// LocalUser is an unprivileged user of the node, no QEMU.
const LocalUser = 65534

// Main runs the role this process was started for, if any, and exits; it
// returns at once in the test process itself.
func Main() {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	err := run(role, os.Args[1:])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Proc is a running neighbour.
type Proc struct {
	Pid  int
	cmd  *exec.Cmd
	out  *bufio.Reader
	once sync.Once
}

// Start runs role as uid:gid with args and waits for it to say it is
// ready. The process is killed when the test ends.
//
// Roles:
//   - listen PATH WORD: listens on PATH; writes WORD to each connection and
//     keeps it open.
//   - take PATH WORD: renames the socket at PATH away, as a sibling QEMU
//     of the same uid may, and listens there in its place.
//   - send PATH WORD: connects to PATH once it exists, writes WORD, and
//     reports what comes back (reply "...") until the connection closes.
//   - tcpsend ADDR HEX FROM-IP: connects to ADDR over TCP from FROM-IP,
//     writes the bytes HEX spells, and reports the first line that comes
//     back (reply "...").
//   - hold ADDR N: keeps N TCP connections to ADDR open, sending nothing,
//     each opened again as soon as it is closed.
func Start(t testing.TB, uid, gid int, role string, args ...string) *Proc {
	t.Helper()
	testenv.Root(t, fmt.Sprintf("run a neighbour as uid %d", uid))
	bin := sharedBinary(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), envRole+"="+role)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a %s neighbour as uid %d: %v", role, uid, err)
	}
	p := &Proc{Pid: cmd.Process.Pid, cmd: cmd, out: bufio.NewReader(stdout)}
	t.Cleanup(p.Stop)
	line, err := p.Line(10 * time.Second)
	if err != nil || line != "ready" {
		t.Fatalf("the %s neighbour (uid %d) did not get ready: %q %v", role, uid, line, err)
	}
	return p
}

// Line is the neighbour's next line of output, within d.
func (p *Proc) Line(d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", fmt.Errorf("nothing within %v", d)
	}
}

// Stop kills the neighbour and reaps it.
func (p *Proc) Stop() {
	p.once.Do(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// sharedBinary is a copy of the test binary that any user may run: go
// test builds it in a directory only its builder may enter.
func sharedBinary(t testing.TB) string {
	binOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			binErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ferry-neighbour-")
		if err != nil {
			binErr = err
			return
		}
		if binErr = os.Chmod(dir, 0o755); binErr != nil {
			return
		}
		binPath = filepath.Join(dir, filepath.Base(self))
		binErr = copyFile(self, binPath)
	})
	if binErr != nil {
		t.Fatalf("a test binary for neighbours: %v", binErr)
	}
	return binPath
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SharedDir is a directory every user may enter, for sockets neighbours
// must reach; removed when the test ends.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-neighbourhood-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func run(role string, args []string) error {
	switch role {
	case "listen", "take":
		if len(args) != 2 {
			return fmt.Errorf("%s PATH WORD", role)
		}
		if role == "take" {
			if err := os.Rename(args[0], args[0]+".away"); err != nil {
				return err
			}
		}
		return listen(args[0], args[1])
	case "send":
		if len(args) != 2 {
			return fmt.Errorf("send PATH WORD")
		}
		return send(args[0], args[1])
	case "tcpsend":
		if len(args) != 3 {
			return fmt.Errorf("tcpsend ADDR HEX FROM-IP")
		}
		return tcpSend(args[0], args[1], args[2])
	case "hold":
		if len(args) != 2 {
			return fmt.Errorf("hold ADDR N")
		}
		return hold(args[0], args[1])
	}
	return fmt.Errorf("unknown role %q", role)
}

func listen(path, word string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			c.Write([]byte(word))
			io.Copy(io.Discard, c)
		}()
	}
}

// send dials path as soon as it exists, within 10 s: a test may start
// the neighbour first, to learn its pid, and create the socket after.
func send(path, word string) error {
	fmt.Println("ready")
	var c net.Conn
	var err error
	for give := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = net.Dial("unix", path); err == nil || time.Now().After(give) {
			break
		}
	}
	if err != nil {
		fmt.Println("refused", err)
		return nil
	}
	defer c.Close()
	c.Write([]byte(word))
	c.(*net.UnixConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	fmt.Printf("reply %q\n", b)
	return nil
}

// hold keeps n connections to addr open and idle: each closed (by the
// other end, to make room) is opened again at once.
func hold(addr, n string) error {
	var count int
	if _, err := fmt.Sscan(n, &count); err != nil {
		return err
	}
	var opened sync.WaitGroup
	opened.Add(count)
	for range count {
		go func() {
			first := true
			for {
				c, err := net.Dial("tcp", addr)
				if first {
					opened.Done()
					first = false
				}
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
	}
	opened.Wait()
	fmt.Println("ready")
	select {}
}

func tcpSend(addr, hexBytes, from string) error {
	b, err := hex.DecodeString(hexBytes)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		fmt.Println("refused", err)
		return nil
	}
	defer c.Close()
	c.Write(b)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("reply %q\n", strings.TrimSpace(line))
	return nil
}
