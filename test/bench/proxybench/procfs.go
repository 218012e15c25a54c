package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

var errNoProcess = errors.New("no such process")

type procStatus struct {
	ppid int
	// ticks is utime+stime+cutime+cstime: the process's own CPU and that of
	// the children it has reaped.
	ticks int64
}

func procStat(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStatus{}, errNoProcess
	}
	// The command name may hold spaces and parentheses; fields follow the last ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStatus{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStatus{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var st procStatus
	st.ppid, _ = strconv.Atoi(f[1])
	for _, v := range f[11:15] { // utime stime cutime cstime
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return procStatus{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		st.ticks += n
	}
	return st, nil
}

// listening reads the listening sockets of the process's network
// namespace, which /proc/PID/net shows from outside it.
func listening(pid int, network, addr string) bool {
	switch network {
	case "tcp":
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return false
		}
		p, _ := strconv.Atoi(port)
		suffix := fmt.Sprintf(":%04X", p)
		for _, file := range []string{"tcp", "tcp6"} {
			for _, f := range procTable(pid, file) {
				// local_address, st (0A is LISTEN)
				if len(f) > 3 && strings.HasSuffix(f[1], suffix) && f[3] == "0A" {
					return true
				}
			}
		}
	case "unix":
		for _, f := range procTable(pid, "unix") {
			// Flags 00010000 marks a listening socket; the path comes last.
			if len(f) > 7 && f[3] == "00010000" && f[7] == addr {
				return true
			}
		}
	}
	return false
}

func procTable(pid int, name string) [][]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, name))
	if err != nil {
		return nil
	}
	var rows [][]string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

// descendants lists the live processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procStat(p)
		if err != nil {
			continue
		}
		children[st.ppid] = append(children[st.ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		kids := children[queue[0]]
		queue = append(queue[1:], kids...)
		out = append(out, kids...)
	}
	return out
}
