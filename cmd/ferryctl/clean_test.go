package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-vm/ferry/api"
)

// hostile is what a pod's libvirt may put in a domain name or an error:
// clear the screen, set the title, a C1 CSI, and a forged line.
const hostile = "\x1b[2J\x1b]0;pwned\x07\u009b31m\nforged line"

// hostileShown is hostile as an operator must see it: every byte visible.
const hostileShown = `\x1b[2J\x1b]0;pwned\a\u009b31m\nforged line`

// Text from outside ferryd's control reaches the operator's terminal
// visible but inert, whatever command prints it; -o json stays exact.
func TestHostileTextReachesTheTerminalEscaped(t *testing.T) {
	end := time.Now()
	j := api.Job{Domain: "vm" + hostile, Role: api.RoleSource, Phase: api.PhaseFailed, Socket: "/run/" + hostile,
		StartTime: end.Add(-time.Second), EndTime: &end, FailureReason: "libvirt: " + hostile,
		Events: []api.Event{{Time: end, Kind: "failed", Detail: "libvirt: " + hostile}}}
	sock := fakeFerryd(t, hostileFerryd(t, j))

	for _, args := range [][]string{{"job", "vm1"}, {"jobs"}, {"jobs", "-o", "wide"}, {"domains", "-o", "wide"}, {"watch"}, {"abort", "vm1"}} {
		_, stdout, stderr := ctl(append([]string{"--socket", sock}, args...)...)
		out := stdout + stderr
		if bad := unsafeForTerminal(out); bad != "" {
			t.Errorf("%v printed %s:\n%q", args, bad, out)
		}
		if !strings.Contains(out, hostileShown) {
			t.Errorf("%v does not show the hostile text escaped (%s):\n%q", args, hostileShown, out)
		}
	}

	_, stdout, _ := ctl("--socket", sock, "-o", "json", "job", "vm1")
	var got api.Job
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.Domain != j.Domain || got.Events[0].Detail != j.Events[0].Detail {
		t.Errorf("-o json is not the job as ferryd sent it (%v):\n%s", err, stdout)
	}
}

// hostileFerryd answers every reading command with j, or with what it
// says, and refuses an abort with j's failure reason.
func hostileFerryd(t *testing.T, j api.Job) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var v any
		switch {
		case r.URL.Path == "/v1/jobs":
			v = api.JobsResponse{Jobs: []api.Job{j}}
		case r.URL.Path == "/v1/domains":
			v = api.DomainsResponse{Node: "node-a", Domains: []api.Domain{{Name: j.Domain, State: "running", Socket: j.Socket}},
				Libvirt: []api.SocketStatus{{Socket: j.Socket, LastError: j.FailureReason}}}
		case r.URL.Path == "/v1/watch", strings.HasPrefix(r.URL.Path, "/v1/jobs/") && r.Method == http.MethodGet:
			v = j
		case strings.HasSuffix(r.URL.Path, "/abort"):
			w.WriteHeader(http.StatusConflict)
			v = api.ErrorResponse{Error: j.FailureReason}
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(v)
	}
}

// unsafeForTerminal names the first thing in s a terminal could act on
// other than a line's end: a line starting with the forged text counts.
func unsafeForTerminal(s string) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || r >= 0x7f && r <= 0x9f) {
			return "control character " + strconv.QuoteRune(r)
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "forged line") {
			return "a forged line"
		}
	}
	return ""
}

func TestCleanEscapesWhatATerminalActsOn(t *testing.T) {
	for in, want := range map[string]string{
		"plain /run/libvirt-sock": "plain /run/libvirt-sock",
		"vm-é日本 – ok\\x1b":        "vm-é日本 – ok\\x1b",
		"a\tb":                    "a b",
		"a\x1b[2Jb":               `a\x1b[2Jb`,
		"bell\x07 del\x7f":        `bell\a del\x7f`,
		"c1\u009b31m \u0085":      `c1\u009b31m \u0085`,
		"bad\x9b\xffutf8":         `bad\x9b\xffutf8`,
		"cut\xe6\x97":             `cut\xe6\x97`,
		"rlo\u202eexe.txt":        `rlo\u202eexe.txt`,
		"two\r\nlines":            `two\r\nlines`,
		"\ufffd stays":            "\ufffd stays",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}
