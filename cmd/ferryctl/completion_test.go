package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/internal/testenv"
)

// The bash script completes commands, -o formats and, asking the real
// ferryd, domain names, when run by bash itself.
func TestBashCompletion(t *testing.T) {
	testenv.File(t, bashCompletion, "the bash-completion package; make prepare installs it")
	sock, tr, lv := ferryd(t)
	migrating(t, tr, lv, "vm-alpha", 100<<20)
	bin := ferryctlBinary(t)
	script, err := ferryctlCommand(bin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ferryctl.bash")
	if err := os.WriteFile(file, script, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	cases := []struct {
		line string
		want []string
	}{
		{"ferryctl wa", []string{"watch"}},
		{"ferryctl jobs -o ", []string{"table", "wide", "json", "yaml"}},
		{"ferryctl -o j", []string{"json"}},
		{"ferryctl job ", []string{"vm-alpha"}},
		{"ferryctl abort vm", []string{"vm-alpha"}},
		{"ferryctl completion ", []string{"bash", "zsh"}},
		{"ferryctl migrate vm-alpha --post", []string{"--postcopy", "--postcopy-after", "--postcopy-bandwidth-mibs"}},
	}
	// One bash runs every case: loading bash-completion takes a while.
	prog := "source " + bashCompletion + "\nsource " + file + "\n"
	for _, c := range cases {
		words := strings.Fields(c.line)
		if strings.HasSuffix(c.line, " ") {
			words = append(words, "")
		}
		prog += "COMP_WORDS=(" + shellQuote(words) + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n" +
			"COMP_LINE='" + c.line + "'\nCOMP_POINT=${#COMP_LINE}\nCOMPREPLY=()\n" +
			"__start_ferryctl\necho \"${COMPREPLY[*]}\"\n"
	}
	cmd := exec.Command("bash", "-c", prog)
	cmd.Env = append(append(os.Environ(), asMainEnv...), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "FERRY_SOCKET="+sock)
	// compopt complains on stderr outside a real completion.
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("%d answers to %d completions:\n%s", len(got), len(cases), out)
	}
	for i, c := range cases {
		if want := strings.Join(c.want, " "); got[i] != want {
			t.Errorf("%q completes to %q, want %q", c.line, got[i], want)
		}
	}
}

func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return strings.Join(q, " ")
}

func TestZshCompletion(t *testing.T) {
	zsh := testenv.Tool(t, "zsh", "make prepare installs it")
	code, script, stderr := ctl("completion", "zsh")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(script, "#compdef ferryctl") || !strings.Contains(script, "__complete") {
		t.Fatalf("not a zsh completion for ferryctl:\n%.300s", script)
	}
	file := filepath.Join(t.TempDir(), "_ferryctl")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// What the script asks ferryctl for is what the bash test exercised.
	sock, tr, lv := ferryd(t)
	migrating(t, tr, lv, "vm-alpha", 100<<20)
	code, out, _ := ctl("--socket", sock, "__complete", "postcopy", "")
	if code != 0 || !strings.Contains(out, "vm-alpha\trunning") {
		t.Errorf("__complete postcopy: exit %d, %q", code, out)
	}
}

const bashCompletion = "/usr/share/bash-completion/bash_completion"
