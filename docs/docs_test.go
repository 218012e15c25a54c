package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is where the documents' repository-relative paths start.
const repoRoot = ".."

// repoURL is the repository on GitHub: its links (runbook_urls above all)
// are checked like relative ones.
var repoURL = regexp.MustCompile(`^https://github\.com/ferry-vm/ferry/(?:blob|tree)/main/(.*)$`)

// documents are the Markdown files checked, repository-relative.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "test/README.md", "test/bench/README.md"}
	for _, d := range docs {
		out = append(out, filepath.ToSlash(filepath.Join("docs", d)))
	}
	return out
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose is a document's lines outside fenced code blocks: a link or a
// heading inside code is text. keepCode keeps the text of code spans (a
// heading's slug has it) rather than blanking them (a link inside one is
// no link).
func prose(text string, keepCode bool) []string {
	var out []string
	in := ""
	for _, l := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case in == "":
				in = m[1]
			case in == m[1]:
				in = ""
			}
			out = append(out, "")
			continue
		}
		if in != "" {
			out = append(out, "")
			continue
		}
		out = append(out, codeSpan.ReplaceAllStringFunc(l, func(s string) string {
			if keepCode {
				return strings.Trim(s, "`")
			}
			return strings.Repeat(" ", len(s))
		}))
	}
	return out
}

// Slug is the anchor GitHub gives a heading: its text lowercased, spaces
// to '-', every other character but letters, digits, '-' and '_' dropped.
func Slug(h string) string {
	h = mdLinkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors a Markdown document has: its headings' slugs,
// a repeated one numbered as GitHub numbers it, and explicit HTML anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text, true) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// links are a document's link targets, with the line each is on.
func links(text string) (targets []string, lines []int) {
	for i, l := range prose(text, false) {
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
		if m := refLink.FindStringSubmatch(l); m != nil {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
	}
	return targets, lines
}

// checker resolves links against the repository, reading each target once.
type checker struct {
	root    string
	anchors map[string]map[string]bool
}

// check says what is wrong with a link found in the repository-relative
// file from, or "" when it leads somewhere.
func (c *checker) check(from, target string) string {
	if target == "" {
		return "empty link"
	}
	var path, frag string
	if m := repoURL.FindStringSubmatch(target); m != nil {
		path, frag, _ = strings.Cut(m[1], "#")
		if path == "" {
			path = "."
		}
	} else {
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			return "" // elsewhere on the web: not checked
		}
		path, frag, _ = strings.Cut(target, "#")
		if strings.HasPrefix(path, "/") {
			return "a path from the root of a site: write it relative to " + from
		}
		if path == "" {
			path = from
		} else {
			path = filepath.ToSlash(filepath.Join(filepath.Dir(from), path))
		}
	}
	if strings.HasPrefix(path, "../") || path == ".." {
		return "leads out of the repository"
	}
	if _, err := os.Stat(filepath.Join(c.root, path)); err != nil {
		return fmt.Sprintf("no file %s", path)
	}
	if frag == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	a, ok := c.anchors[path]
	if !ok {
		b, err := os.ReadFile(filepath.Join(c.root, path))
		if err != nil {
			return err.Error()
		}
		a = anchors(string(b))
		c.anchors[path] = a
	}
	if !a[frag] {
		return fmt.Sprintf("no heading #%s in %s", frag, path)
	}
	return ""
}

func newChecker() *checker { return &checker{root: repoRoot, anchors: map[string]map[string]bool{}} }

func TestDocumentLinksResolve(t *testing.T) {
	c := newChecker()
	n := 0
	for _, doc := range documents(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		targets, lines := links(string(b))
		for i, target := range targets {
			n++
			if why := c.check(doc, target); why != "" {
				t.Errorf("%s:%d: link %s: %s", doc, lines[i], target, why)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d links found in the documents: is the link pattern still right?", n)
	}
}

var runbookURL = regexp.MustCompile(`(?m)^\s*runbook_url:\s*["']?([^"'\s]+)`)

// An alert's runbook_url is what a paged operator opens first.
func TestRunbookURLsResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "*", "*.yaml"))
	c := newChecker()
	inAlerts := 0
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, m := range runbookURL.FindAllStringSubmatch(string(b), -1) {
			if filepath.Base(f) == "alerts.yaml" {
				inAlerts++
			}
			if !repoURL.MatchString(m[1]) {
				t.Errorf("%s: runbook_url %s is not a document of this repository's main branch", rel, m[1])
				continue
			}
			if why := c.check(rel, m[1]); why != "" {
				t.Errorf("%s: runbook_url %s: %s", rel, m[1], why)
			}
		}
	}
	if inAlerts == 0 {
		t.Fatal("no runbook_url found in deploy/alerts.yaml")
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"FerryVMIPostCopyFailed":                  "ferryvmipostcopyfailed",
		"One guest, always":                       "one-guest-always",
		"Neighbours: what each may do to Ferry":   "neighbours-what-each-may-do-to-ferry",
		"What deploy/ installs":                   "what-deploy-installs",
		"Sockets and QEMU's user":                 "sockets-and-qemus-user",
		"ferry_vmi_marks_total and `--state-dir`": "ferry_vmi_marks_total-and---state-dir",
		"A [link](x.md) in it":                    "a-link-in-it",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// The checker finds what it is for: a missing file, a missing heading, a
// repeated heading's numbered anchor, and links inside code left alone.
func TestCheckerCatchesBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
	os.WriteFile(filepath.Join(dir, "docs", "a.md"), []byte("# A\n\n## Twice\n\n## Twice\n\n```\n## Not a heading\n```\n"), 0o644)
	c := &checker{root: dir, anchors: map[string]map[string]bool{}}
	for target, ok := range map[string]bool{
		"a.md":               true,
		"a.md#twice":         true,
		"a.md#twice-1":       true,
		"a.md#twice-2":       false,
		"a.md#not-a-heading": false,
		"#a":                 true,
		"#b":                 false,
		"b.md":               false,
		"../../etc":          false,
		"https://github.com/ferry-vm/ferry/blob/main/docs/a.md#twice": true,
		"https://github.com/ferry-vm/ferry/blob/main/docs/a.md#none":  false,
		"https://github.com/ferry-vm/ferry/blob/main/docs/b.md":       false,
		"https://example.com/x#y":                                     true,
	} {
		if why := c.check("docs/a.md", target); (why == "") != ok {
			t.Errorf("%s: %q, want ok=%v", target, why, ok)
		}
	}
	targets, _ := links("[x](a.md) `[y](b.md)`\n```\n[z](c.md)\n```\n[r]: d.md\n")
	if strings.Join(targets, ",") != "a.md,d.md" {
		t.Errorf("links %v, want a.md and d.md", targets)
	}
}
