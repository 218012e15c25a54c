package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferry-vm/ferry/internal/generated"
)

const referencePath = "../../docs/ferryctl.md"

// reference renders docs/ferryctl.md from ferryctl's command tree, the
// one --help prints, so the reference cannot drift from the code.
func reference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("# ferryctl reference\n\n")
	b.WriteString("<!-- Generated from cmd/ferryctl's commands by TestReferenceDocIsCurrent: edit them there and run make generate. -->\n\n")
	b.WriteString("Every command and flag of `ferryctl`, as `ferryctl --help` and `ferryctl COMMAND --help` print them.\n")
	b.WriteString("How it is used on a node, its output formats and exit status: [operations.md](operations.md#ferryctl).\n\n")
	fmt.Fprintf(&b, "```\n%s\n```\n\n", root.Long)
	b.WriteString("## Global flags\n\nThey go before or after the command.\n\n")
	flagTable(&b, root.PersistentFlags())
	b.WriteString("## Commands\n\n| command | |\n|---|---|\n")
	for _, c := range commands(root) {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.Name(), strings.ReplaceAll(c.CommandPath(), " ", "-"), cellText(c.Short))
	}
	b.WriteString("\n")
	for _, c := range commands(root) {
		fmt.Fprintf(&b, "### %s\n\n```\n%s\n```\n\n", c.CommandPath(), c.UseLine())
		text := c.Long
		if text == "" {
			text = c.Short
		}
		b.WriteString(strings.TrimSpace(text) + "\n\n")
		if c.Example != "" {
			fmt.Fprintf(&b, "```\n%s\n```\n\n", strings.TrimRight(c.Example, "\n"))
		}
		flagTable(&b, c.LocalNonPersistentFlags())
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range root.Commands() {
		if c.Name() != "help" && !c.Hidden {
			out = append(out, c)
		}
	}
	return out
}

func flagTable(b *strings.Builder, fs *pflag.FlagSet) {
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		if t := f.Value.Type(); t != "bool" {
			name += " " + t
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		rows = append(rows, fmt.Sprintf("| `%s` | %s | %s |", name, def, cellText(f.Usage)))
	})
	if len(rows) == 0 {
		return
	}
	b.WriteString("| flag | default | |\n|---|---|---|\n" + strings.Join(rows, "\n") + "\n\n")
}

// cellText keeps help text literal in a table cell.
func cellText(s string) string {
	return strings.NewReplacer("\n", " ", "|", `\|`, "*", `\*`, "<", "&lt;", "[", `\[`, "]", `\]`).Replace(s)
}

// docs/ferryctl.md is what ferryctl's commands say; FERRY_UPDATE_DOCS=1
// (make generate) writes it.
func TestReferenceDocIsCurrent(t *testing.T) {
	t.Setenv("FERRY_SOCKET", "") // the default, not this machine's
	generated.Check(t, referencePath, []byte(reference(newRoot(&globals{}))), "cmd/ferryctl's commands")
}

// Every command is in the reference and in the root's own list of them.
func TestTheRootNamesEveryCommand(t *testing.T) {
	root := newRoot(&globals{})
	err := root.RunE(root, nil)
	for _, c := range commands(root) {
		if !strings.Contains(err.Error(), c.Name()) {
			t.Errorf("ferryctl with no command does not name %s: %v", c.Name(), err)
		}
	}
}

// maxHelpLine is the longest a command's Short or a flag's help may be:
// one line of --help. What more there is goes in the command's Long.
const maxHelpLine = 100

// Every command's Short and every flag's help is one short line.
func TestHelpLinesAreShort(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if strings.ContainsAny(c.Short, "\n\r") || len(c.Short) > maxHelpLine {
			t.Errorf("%s: Short is %d characters or more than one line, past the %d of one line: move the rest to Long", c.CommandPath(), len(c.Short), maxHelpLine)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.ContainsAny(f.Usage, "\n\r") || len(f.Usage) > maxHelpLine {
				t.Errorf("%s --%s: help is %d characters or more than one line, past the %d of one line: move the rest to the command's Long", c.CommandPath(), f.Name, len(f.Usage), maxHelpLine)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(&globals{}))
}
