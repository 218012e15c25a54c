package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/internal/generated"
)

const flagsDocPath = "../../docs/flags.md"

// docFlags is ferryd's FlagSet as the reference shows it: no environment
// and no hostname, so the defaults are the same on every machine.
func docFlags() *flag.FlagSet {
	fs, _ := newFlags(func(string) string { return "" }, "")
	return fs
}

// flagsDoc renders docs/flags.md from the FlagSet ferryd parses, in
// VisitAll's order (by name), so the reference cannot drift from the code.
func flagsDoc(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("<!-- Generated from cmd/ferryd's flags by TestFlagsDocIsCurrent: edit them there and run make generate. -->\n\n")
	b.WriteString("# ferryd flags\n\n")
	b.WriteString("Every flag of `ferryd`, as `ferryd --help` prints it. A flag that names an\n")
	b.WriteString("environment variable takes its default from there; the command line wins.\n")
	b.WriteString("How to run ferryd: [operations.md](operations.md#running-ferryd).\n\n")
	b.WriteString("| flag | default | |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		name := "--" + f.Name
		if kind, _ := flag.UnquoteUsage(f); kind != "" {
			if _, list := f.Value.(*stringList); list {
				kind = "string"
			}
			name += " " + kind
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, mdEscape(f.Usage))
	})
	return b.String()
}

// mdEscape keeps help text literal in a table cell: globs and paths
// (DIR/*/..., kubernetes.io~empty-dir) must not turn into emphasis.
func mdEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "~", `\~`, "`", "\\`", "<", "&lt;", "[", `\[`, "]", `\]`).Replace(s)
}

// docs/flags.md is what ferryd's flags say; FERRY_UPDATE_DOCS=1 (make generate)
// writes it.
func TestFlagsDocIsCurrent(t *testing.T) {
	generated.Check(t, flagsDocPath, []byte(flagsDoc(docFlags())), "cmd/ferryd's flags")
}

var envInUsage = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]+)`)

// The reference has no column of its own for the environment: every
// variable a flag's default is read from is named in some flag's help.
func TestFlagsNameTheirEnvironment(t *testing.T) {
	read := map[string]bool{}
	fs, _ := newFlags(func(k string) string { read[k] = true; return "" }, "")
	named := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		for _, m := range envInUsage.FindAllStringSubmatch(f.Usage, -1) {
			named[m[1]] = true
		}
	})
	if len(read) == 0 {
		t.Fatal("newFlags read no environment variable")
	}
	for k := range read {
		if !named[k] {
			t.Errorf("a flag's default is read from %s, which no flag's help names (as \"env %s\")", k, k)
		}
	}
	// Every flag but --version has one, so a DaemonSet sets any of them
	// the same way.
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "version" && !envInUsage.MatchString(f.Usage) {
			t.Errorf("--%s names no environment variable", f.Name)
		}
	})
	// run reads these itself, after parsing.
	for _, k := range []string{"FERRY_LIBVIRT_SOCKETS", "FERRY_MIGRATION_ALLOWED_BRIDGES", "FERRY_MIGRATION_ALLOWED_NETWORKS", "FERRY_MIGRATION_ALLOWED_PATHS", "FERRY_KUBELET_ROOT"} {
		if !named[k] {
			t.Errorf("no flag's help names %s", k)
		}
	}
}

// The FlagSet ferryd parses reads its defaults from the environment given.
func TestFlagsDefaultsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1", "FERRY_SAMPLE_INTERVAL": "3s", "FERRY_PROXY_TLS": "false", "FERRY_OUTBOUND_MIGRATIONS": "7", "FERRY_MAX_DOWNTIME_MS": "450"}
	fs, o := newFlags(func(k string) string { return env[k] }, "host")
	if err := fs.Parse([]string{"--metrics-addr", ":1"}); err != nil {
		t.Fatal(err)
	}
	if o.cfg.NodeName != "n1" || o.cfg.SampleInterval.String() != "3s" || o.cfg.ProxyTLS || o.cfg.MetricsAddr != ":1" || o.cfg.OutboundSlots != 7 || o.maxDowntimeMs != 450 {
		t.Fatalf("config %+v", o.cfg)
	}
	fs, o = newFlags(func(string) string { return "" }, "host")
	if err := fs.Parse([]string{"--node-name", "n2"}); err != nil || o.cfg.NodeName != "n2" {
		t.Fatalf("node name %q, %v", o.cfg.NodeName, err)
	}
	if fs, o = newFlags(func(string) string { return "" }, "host"); fs.Parse(nil) != nil || o.cfg.NodeName != "host" {
		t.Fatalf("node name %q, want the hostname", o.cfg.NodeName)
	}
}
