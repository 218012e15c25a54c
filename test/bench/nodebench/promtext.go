package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The two series the bench reads from ferryd's page. ferryd counts its
// libvirt calls itself: no proxy between it and the launchers could see
// them apart from keepalives, and the counter sums every connection.
const (
	seriesGoroutines   = "go_goroutines"
	seriesLibvirtCalls = "ferry_libvirt_calls_total"
)

// page is what one scrape says.
type page struct {
	Goroutines float64
	// Calls is ferry_libvirt_calls_total by its op label, summed over any
	// other labels (node is one value on one ferryd).
	Calls map[string]float64
	Bytes int
}

func (p page) totalCalls() float64 {
	var sum float64
	for _, n := range p.Calls {
		sum += n
	}
	return sum
}

// parsePage reads the Prometheus text format, only as far as the two
// series need: a page without go_goroutines is not ferryd's (or is one
// from before it served the Go runtime's series), and is refused.
func parsePage(text string) (page, error) {
	p := page{Calls: map[string]float64{}, Bytes: len(text)}
	haveGoroutines := false
	for i, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, value, err := parseSampleLine(line)
		if err != nil {
			return p, fmt.Errorf("line %d: %w", i+1, err)
		}
		switch name {
		case seriesGoroutines:
			p.Goroutines, haveGoroutines = value, true
		case seriesLibvirtCalls:
			p.Calls[labels["op"]] += value
		}
	}
	if !haveGoroutines {
		return p, fmt.Errorf("no %s on the page: not a ferryd that serves the Go runtime's series", seriesGoroutines)
	}
	return p, nil
}

// parseSampleLine splits `name{a="x",b="y"} value [timestamp]`.
func parseSampleLine(line string) (name string, labels map[string]string, value float64, err error) {
	rest := line
	end := strings.IndexAny(rest, "{ ")
	if end <= 0 {
		return "", nil, 0, fmt.Errorf("no metric name in %q", line)
	}
	name, rest = rest[:end], rest[end:]
	if strings.HasPrefix(rest, "{") {
		if labels, rest, err = parseLabels(rest[1:]); err != nil {
			return "", nil, 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	f := strings.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return "", nil, 0, fmt.Errorf("%s: want a value and at most a timestamp after the labels, got %q", name, rest)
	}
	if value, err = strconv.ParseFloat(f[0], 64); err != nil {
		return "", nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	return name, labels, value, nil
}

// parseLabels reads `a="x",b="y"}` and returns what follows the brace.
// Values may hold the format's escapes \\, \" and \n, and commas or
// braces inside quotes: ferryd's op labels are free text ("list all
// domains").
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, "", fmt.Errorf("bad label at %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' {
				val.WriteByte(s[i])
				continue
			}
			if i++; i == len(s) {
				break
			}
			switch s[i] {
			case 'n':
				val.WriteByte('\n')
			default:
				val.WriteByte(s[i])
			}
		}
		if i >= len(s) {
			return nil, "", fmt.Errorf("label %s: unterminated value", key)
		}
		labels[key] = val.String()
		s = strings.TrimLeft(s[i+1:], " ")
		s = strings.TrimPrefix(s, ",")
	}
}
