package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/internal/neighbour"
	"github.com/ferry-vm/ferry/peer"
)

// TestMain lets the test binary double as a bare target proxy in its own
// process, so its system calls can be counted apart from the test's.
func TestMain(m *testing.M) {
	neighbour.Main()
	if dir := os.Getenv("FERRY_PROXY_CHILD"); dir != "" {
		childProxy(dir)
		return
	}
	os.Exit(m.Run())
}

func childProxy(dir string) {
	p, err := New(Config{Listen: "127.0.0.1:0", SocketDir: dir, Metrics: testMetrics()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	addr, err := p.Listen()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if _, err := p.Register("zc", "vm", 0, false); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("listening", addr)
	p.Serve(context.Background())
}

// procIO reads a process's read/write system call counts and bytes.
func procIO(t *testing.T, pid int) map[string]int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

// TestPlainRelayIsZeroCopy relays 512 MiB through a plain (no TLS) target
// proxy in a child process and checks that its read/write system calls did
// not carry the bytes: splice(2) moved them inside the kernel.
func TestPlainRelayIsZeroCopy(t *testing.T) {
	dir := t.TempDir()
	sink, err := net.Listen("unix", TargetSocketPath(dir, "zc", peer.KindMemory))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := sink.Accept()
		if err != nil {
			received <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		received <- n
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FERRY_PROXY_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("child proxy did not start: %q %v", line, err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := peer.Header{Kind: peer.KindMemory, ID: "zc"}.Encode()
	c.Write(hb)
	if err := peer.ReadStatus(c); err != nil {
		t.Fatal(err)
	}
	before := procIO(t, cmd.Process.Pid)
	const size = 512 << 20
	chunk := make([]byte, 1<<20)
	start := time.Now()
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	if n := <-received; n != size {
		t.Fatalf("sink received %d bytes, want %d", n, size)
	}
	took := time.Since(start)
	after := procIO(t, cmd.Process.Pid)
	c.Close()
	d := func(k string) int64 { return after[k] - before[k] }
	t.Logf("512 MiB relayed in %v (%.0f MiB/s); child read/write syscalls: %d/%d, bytes through them: %d/%d",
		took.Round(time.Millisecond), float64(size>>20)/took.Seconds(), d("syscr"), d("syscw"), d("rchar"), d("wchar"))
	// A user-space copy would need thousands of reads and writes carrying
	// 512 MiB each way; splice leaves only scheduling noise.
	if d("rchar") > size/100 || d("wchar") > size/100 {
		t.Fatalf("the relay copied through user space: %d bytes read, %d written by read/write calls", d("rchar"), d("wchar"))
	}
}
