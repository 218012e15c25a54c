package testbed

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Console returns the guest's serial output from all nodes it ran on, in
// the order it ran there.
func (b *Bed) Console(name string) (string, error) {
	if err := checkGuestName(name); err != nil {
		return "", err
	}
	var gs guestState
	if err := readJSON(guestPath(b.cfg.Dir, name), &gs); err != nil {
		// Not started through the bed: no history, so node order it is.
		gs.Segments = []segment{{Node: "a"}, {Node: "b"}}
	}
	var out strings.Builder
	found := false
	for i, s := range gs.Segments {
		n := b.nodes[s.Node]
		if n == nil {
			continue
		}
		end := int64(-1)
		for _, later := range gs.Segments[i+1:] {
			if later.Node == s.Node {
				end = later.Offset
				break
			}
		}
		chunk, err := readRange(consolePath(n, name), s.Offset, end)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		found = true
		out.Write(chunk)
	}
	if !found {
		return "", fmt.Errorf("testbed: no console output for guest %s", name)
	}
	return out.String(), nil
}

// readRange reads [from, to) of a file; to < 0 means until EOF.
func readRange(path string, from, to int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, err
	}
	if to < 0 {
		return io.ReadAll(f)
	}
	if to < from {
		return nil, nil
	}
	return io.ReadAll(io.LimitReader(f, to-from))
}

var rateRe = regexp.MustCompile(`\brate=(-?[0-9]+(?:\.[0-9]+)?) MiB/s`)

// ParseRates returns the rate= figure of each dirtier report line, in order.
func ParseRates(console string) []float64 {
	var rates []float64
	for _, line := range strings.Split(console, "\n") {
		if m := rateRe.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				rates = append(rates, v)
			}
		}
	}
	return rates
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
