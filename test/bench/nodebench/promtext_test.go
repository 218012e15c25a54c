package main

import "testing"

const ferrydPage = `# HELP ferry_libvirt_calls_total Calls ferryd has sent to libvirt.
# TYPE ferry_libvirt_calls_total counter
ferry_libvirt_calls_total{node="a",op="job stats"} 1200
ferry_libvirt_calls_total{node="a",op="list domains"} 600
ferry_libvirt_calls_total{node="a",op="ping"} 120
ferry_libvirt_calls_total{node="a",op="QEMU monitor {\"x\",y}"} 3
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 87
ferry_libvirt_up{node="a",socket="/var/lib/kubelet/pods/x/virtqemud-sock"} 1 1700000000000
`

func TestParsePageReadsTheTwoSeries(t *testing.T) {
	p, err := parsePage(ferrydPage)
	if err != nil {
		t.Fatal(err)
	}
	if p.Goroutines != 87 {
		t.Errorf("goroutines %v, want 87", p.Goroutines)
	}
	want := map[string]float64{"job stats": 1200, "list domains": 600, "ping": 120, `QEMU monitor {"x",y}`: 3}
	if len(p.Calls) != len(want) {
		t.Errorf("calls %v, want %v", p.Calls, want)
	}
	for op, n := range want {
		if p.Calls[op] != n {
			t.Errorf("calls of %q: %v, want %v", op, p.Calls[op], n)
		}
	}
	if p.totalCalls() != 1923 || p.Bytes != len(ferrydPage) {
		t.Errorf("total %v, bytes %d", p.totalCalls(), p.Bytes)
	}
}

func TestParsePageRefusesWhatIsNotFerrydsPage(t *testing.T) {
	if _, err := parsePage("ferry_libvirt_calls_total{op=\"ping\"} 1\n"); err == nil {
		t.Error("a page without go_goroutines was taken for ferryd's")
	}
	for _, bad := range []string{"go_goroutines", "go_goroutines x", `x{a="b} 1`, `x{a=b} 1`, "{} 1"} {
		if _, err := parsePage(bad + "\n"); err == nil {
			t.Errorf("%q was read", bad)
		}
	}
}

func TestLabelEscapes(t *testing.T) {
	_, labels, v, err := parseSampleLine(`m{a="x\\y",b="new\nline", c="q\"}"} 2.5`)
	if err != nil || v != 2.5 || labels["a"] != `x\y` || labels["b"] != "new\nline" || labels["c"] != `q"}` {
		t.Errorf("labels %q, value %v (%v)", labels, v, err)
	}
}
