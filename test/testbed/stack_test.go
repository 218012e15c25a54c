package testbed

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseStacks(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{"", map[string]string{}, ""},
		{"newest", map[string]string{"a": StackNewest, "b": StackNewest}, ""},
		{"a=oldest, b=newest", map[string]string{"a": StackOldest, "b": StackNewest}, ""},
		{"b=oldest", map[string]string{"b": StackOldest}, ""},
		{"a=sid", nil, `unknown stack "sid"`},
		{"c=oldest", nil, `stack for "c"`},
	} {
		got, err := parseStacks(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseStacks(%q): error %v, want one saying %s", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseStacks(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// A node of another stack runs its /usr, with the loader cache that goes
// with it; a node of the default one mounts nothing more.
func TestStackMounts(t *testing.T) {
	if m := stackMounts("/c", StackDefault); m != "" {
		t.Fatalf("the default stack mounts %q", m)
	}
	m := stackMounts("/c", StackNewest)
	if !strings.Contains(m, "mount --bind /c/stacks/newest/usr /usr") || !strings.Contains(m, "/c/stacks/newest/etc/ld.so.cache /etc/ld.so.cache") {
		t.Fatalf("the newest stack mounts %q", m)
	}
}
