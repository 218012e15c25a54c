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
// VisitAll's order (by name), so the reference cannot drift from the code:
// a table of every flag's one line of help, then each flag that has
// details, under its own heading, linked from its row.
func flagsDoc(fs *flag.FlagSet) string {
	var b, more strings.Builder
	b.WriteString("<!-- Generated from cmd/ferryd's flags by TestFlagsDocIsCurrent: edit them there and run make generate. -->\n\n")
	b.WriteString("# ferryd flags\n\n")
	b.WriteString("Every flag of `ferryd`. The table is what `ferryd --help` prints, one line a\n")
	b.WriteString("flag; a flag linked from it has more below: its default explained, limits,\n")
	b.WriteString("cautions, and how it bears on other flags. A flag that names an environment\n")
	b.WriteString("variable takes its default from there; the command line wins. A repeatable\n")
	b.WriteString("flag's variable takes a comma-separated list.\n")
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
		name = "`" + name + "`"
		if d := flagDetails[f.Name]; d != "" {
			name = "[" + name + "](#--" + f.Name + ")"
			fmt.Fprintf(&more, "\n### `--%s`\n\n%s\n\n%s\n", f.Name, mdEscape(f.Usage), d)
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, def, mdEscape(f.Usage))
	})
	if more.Len() > 0 {
		b.WriteString("\n## Details\n" + more.String())
	}
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

var (
	envInUsage = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]+)`)
	envAtEnd   = regexp.MustCompile(`\(env [A-Z][A-Z0-9_]+\)$`)
)

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
	// the same way; --help shows it at the end of the flag's line.
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "version" && !envAtEnd.MatchString(f.Usage) {
			t.Errorf("--%s names no environment variable at the end of its help, as \"(env NAME)\": %q", f.Name, f.Usage)
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

// maxUsage is the longest a flag's help may be: one line of --help, what
// the flag is. The rest goes in flagDetails.
const maxUsage = 100

// Each flag's help is one short line; its details are docs/flags.md's.
func TestFlagsHelpIsOneLine(t *testing.T) {
	docFlags().VisitAll(func(f *flag.Flag) {
		if strings.ContainsAny(f.Usage, "\n\r") || len(f.Usage) > maxUsage {
			t.Errorf("--%s's help is %d characters or more than one line, past the %d of one line: move the rest to flagDetails", f.Name, len(f.Usage), maxUsage)
		}
	})
}

// Details are of flags ferryd has: a flag renamed or removed takes its
// details with it.
func TestFlagDetailsAreOfFlags(t *testing.T) {
	fs := docFlags()
	for name, d := range flagDetails {
		if fs.Lookup(name) == nil {
			t.Errorf("flagDetails has %q, which is no flag of ferryd", name)
		}
		if strings.TrimSpace(d) == "" {
			t.Errorf("flagDetails[%q] is empty: drop it", name)
		}
	}
}

// --help ends by saying where each flag is told in full.
func TestHelpNamesTheReference(t *testing.T) {
	fs := docFlags()
	var b strings.Builder
	fs.SetOutput(&b)
	fs.Usage()
	out := b.String()
	if !strings.HasPrefix(out, "Usage of ferryd:\n") || !strings.HasSuffix(out, "\n"+helpFooter+"\n") {
		t.Fatalf("--help is\n%s", out)
	}
	if !strings.Contains(helpFooter, "docs/flags.md") {
		t.Errorf("--help does not name docs/flags.md:\n%s", out)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out, "  -"+f.Name) {
			t.Errorf("--help does not list --%s", f.Name)
		}
	})
}
