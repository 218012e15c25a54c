package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is a process the orchestrator started inside a namespace.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startIn runs a command in a namespace. "ip netns exec" execs the command
// in place, so the child's PID is the relay's own and its CPU can be read
// from /proc.
func startIn(ns, name string, argv ...string) (*child, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stderr = os.Stderr
	if argv[0] == "socat" {
		// socat warns that it exits on the signal that stop sends.
		cmd.Stderr = &dropLines{w: os.Stderr, drop: "exiting on signal"}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// waitListening polls the child's namespace for its listening socket: socat
// has no other way to say it is ready, and one way serves every child.
func (c *child) waitListening(network, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.exited() {
			return fmt.Errorf("%s exited before listening on %s", c.name, addr)
		}
		if listening(c.pid(), network, addr) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%s is not listening on %s after 10s", c.name, addr)
}

// stop ends the child and what it forked (socat's per-connection
// processes), each by PID.
func (c *child) stop() {
	if c.exited() {
		return
	}
	tree := append(descendants(c.pid()), c.pid())
	for _, pid := range tree {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-c.done:
		return
	case <-time.After(3 * time.Second):
	}
	for _, pid := range tree {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-c.done
}

// dropLines passes on a child's stderr without the lines that hold drop.
type dropLines struct {
	w       io.Writer
	drop    string
	pending []byte
}

func (d *dropLines) Write(b []byte) (int, error) {
	d.pending = append(d.pending, b...)
	for {
		i := bytes.IndexByte(d.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := d.pending[:i+1]
		d.pending = d.pending[i+1:]
		if !bytes.Contains(line, []byte(d.drop)) {
			d.w.Write(line)
		}
	}
}
