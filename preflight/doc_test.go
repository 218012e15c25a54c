package preflight

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/api"
)

// exportedCodes reads the package's source for its Code constants, so a
// code added without documentation cannot slip past the test below.
func exportedCodes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || !name.IsExported() {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s is not a string literal", name.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, v)
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("found no Code constants")
	}
	return codes
}

var docEntry = regexp.MustCompile(`^\s+- ([a-z0-9_]+) \((blocks|warns)\): \S`)

// documentedCodes reads the code list of the package documentation.
func documentedCodes(t *testing.T) map[string]api.Severity {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package documentation")
	}
	docs := map[string]api.Severity{}
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if m := docEntry.FindStringSubmatch(line); m != nil {
			if _, dup := docs[m[1]]; dup {
				t.Errorf("%s is documented twice", m[1])
			}
			docs[m[1]] = api.Severity(m[2])
		}
	}
	return docs
}

// An operator looks a code up in the package documentation: every code
// is there with the severity it is reported with, and nothing else is.
func TestEveryCodeIsDocumented(t *testing.T) {
	docs := documentedCodes(t)
	codes := exportedCodes(t)
	for _, code := range codes {
		sev, ok := docs[code]
		switch {
		case !ok:
			t.Errorf("code %s is not in doc.go's list", code)
		case sev != Severity(code):
			t.Errorf("doc.go says %s %s, the package reports it as %q", code, sev, Severity(code))
		}
	}
	for code := range docs {
		if !slices.Contains(codes, code) {
			t.Errorf("doc.go lists %s, which is no Code constant", code)
		}
	}
	if len(severities) != len(codes) {
		t.Errorf("%d codes have a severity, %d are exported", len(severities), len(codes))
	}
}
