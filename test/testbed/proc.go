package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc names a process the bed started. The start time guards against
// signalling an unrelated process that reused the PID after a crash or reboot.
type proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// procStat returns the state letter, parent PID and start time of pid.
func procStat(pid int) (state byte, ppid int, start uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// comm (field 2) may contain spaces and parentheses; the rest follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, _ = strconv.Atoi(f[1])
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], ppid, start, err
}

func procOf(pid int) (proc, error) {
	_, _, start, err := procStat(pid)
	if err != nil {
		return proc{}, err
	}
	return proc{PID: pid, Start: start}, nil
}

func (p proc) alive() bool {
	if p.PID <= 0 {
		return false
	}
	state, _, start, err := procStat(p.PID)
	if err != nil || start != p.Start {
		return false
	}
	if state != 'Z' && state != 'X' {
		return true
	}
	// A process whose first thread is a zombie still holds its files
	// (a listening socket) until its other threads have exited: a killed
	// ferryd with a thread in a long system call did, for seconds.
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.PID))
	return len(tasks) > 1
}

func (p proc) signal(sig syscall.Signal) {
	if p.alive() {
		_ = syscall.Kill(p.PID, sig)
	}
}

// stop sends SIGTERM, then SIGKILL once grace has passed.
func (p proc) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	if p.waitGone(grace) {
		return nil
	}
	p.signal(syscall.SIGKILL)
	if p.waitGone(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("process %d survived SIGKILL", p.PID)
}

func (p proc) waitGone(d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if !p.alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// children lists the live child processes of p (socat's per-connection forks).
func (p proc) children() []proc {
	if !p.alive() {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var kids []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, start, err := procStat(pid); err == nil && ppid == p.PID && state != 'Z' {
			kids = append(kids, proc{PID: pid, Start: start})
		}
	}
	return kids
}

// cmdline returns the process's argv, or nil if it is gone.
func (p proc) cmdline() []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil || !p.alive() {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// spawn starts a long-lived process that outlives the calling program (the
// CLI exits right after `up`): own session, output straight into logPath.
func spawn(logPath string, argv ...string) (proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return proc{}, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return proc{}, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc{}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go cmd.Wait() // reaps it if it dies while this program still runs
	p, err := procOf(cmd.Process.Pid)
	if err != nil {
		return proc{}, fmt.Errorf("%s exited immediately; see %s", argv[0], logPath)
	}
	return p, nil
}

// tail returns the last n bytes of a log file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return strings.TrimSpace(string(b[:k]))
}
