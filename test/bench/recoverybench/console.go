package main

import (
	"strings"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/test/testbed"
)

// consoleCounts is what the guest's dirtier has said on its console so far.
type consoleCounts struct {
	// Progress counts its report lines, rate and memory check alike: each
	// is printed only when the guest's vCPU got that far, so one more of
	// them is the guest running.
	Progress int `json:"progress"`
	// OK counts the memory checks that found every page as last written.
	OK int `json:"ok"`
	// Bad is the first check that did not ("" if none).
	Bad string `json:"bad,omitempty"`
}

// countConsole reads complete lines only: a line still being written when
// the file was read is counted on the next read, whole.
func countConsole(text string) consoleCounts {
	var c consoleCounts
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	} else {
		return c
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.Contains(line, "DIRTIER: t="):
			c.Progress++
		case strings.Contains(line, "DIRTIER: verify=ok"):
			c.Progress++
			c.OK++
		case strings.Contains(line, "DIRTIER: verify=BAD"):
			c.Progress++
			if c.Bad == "" {
				c.Bad = strings.TrimSpace(line)
			}
		}
	}
	return c
}

// consoleSample is the counts as read at a time: the time the read
// finished, so whatever it saw was there by then.
type consoleSample struct {
	At time.Time
	consoleCounts
}

// consoleWatch reads the guest's console every poll and keeps a sample
// each time the counts change: the console carries no wall-clock time, so
// the time a line is first seen is when the guest printed it, to within
// a poll.
type consoleWatch struct {
	mu      sync.Mutex
	samples []consoleSample
	lastErr error
	stop    chan struct{}
	done    chan struct{}
}

const consolePoll = 50 * time.Millisecond

func watchConsole(b *testbed.Bed, name string) *consoleWatch {
	w := &consoleWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(consolePoll)
		defer t.Stop()
		for {
			text, err := b.Console(name)
			at := time.Now()
			w.mu.Lock()
			if err != nil {
				w.lastErr = err
			} else {
				c := countConsole(text)
				if n := len(w.samples); n == 0 || w.samples[n-1].consoleCounts != c {
					w.samples = append(w.samples, consoleSample{at, c})
				}
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// latest is the last sample taken, ok false before the first.
func (w *consoleWatch) latest() (consoleSample, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return consoleSample{}, false
	}
	return w.samples[len(w.samples)-1], true
}

// finish stops the watch and returns its samples and the last read error.
func (w *consoleWatch) finish() ([]consoleSample, error) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]consoleSample(nil), w.samples...), w.lastErr
}

// sampleAt is the last sample taken at or before t: the counts as they stood then.
func sampleAt(ss []consoleSample, t time.Time) (consoleSample, bool) {
	var out consoleSample
	found := false
	for _, s := range ss {
		if s.At.After(t) {
			break
		}
		out, found = s, true
	}
	return out, found
}

// firstGrowth is the first sample after t with more progress lines than
// base.
func firstGrowth(ss []consoleSample, t time.Time, base consoleCounts) (consoleSample, bool) {
	for _, s := range ss {
		if s.At.After(t) && s.Progress > base.Progress {
			return s, true
		}
	}
	return consoleSample{}, false
}
