package kubeapi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child started by this package; it is only ever signalled by its own PID.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	err     error         // Wait's result, valid after done
}

func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	// Append so that a restarted kube-apiserver's log follows the previous one.
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	fmt.Fprintf(log, "==== %s %s %q\n", time.Now().Format(time.RFC3339Nano), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// If the test binary dies without calling Stop (panic, go test -timeout), the kernel
	// kills the children instead of leaving them holding ports. The signal is tied to
	// the forking OS thread, which the Go runtime keeps for the life of the process
	// unless a goroutine exits while locked to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace for the process to exit, then SIGKILLs it.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s (pid %d): %w", p.name, p.pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.pid(), err)
	}
	<-p.done
	return nil
}

// logTail returns the last n lines of the process's log, for error messages.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
