package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// constantsOf reads the values of the string constants of a type the
// debug API's contract declares.
func constantsOf(t *testing.T, file, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != typ || len(v.Values) != 1 {
				continue
			}
			if lit, ok := v.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s constants in %s", typ, file)
	}
	return out
}

// The reference of ferryctl's JSON lists the values a job's phase, mode
// and convergence take, as "`field` (A, B, C)": a script switching on them
// must know them all, and no other.
func TestOperationsDocListsEveryPhaseAndMode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for field, typ := range map[string]string{"phase": "Phase", "mode": "Mode", "convergence": "Verdict"} {
		m := regexp.MustCompile("`" + field + "`\\s+\\(([^)]*)\\)").FindStringSubmatch(string(b))
		if m == nil {
			t.Errorf("docs/operations.md lists no values of %s", field)
			continue
		}
		var listed []string
		for _, v := range strings.Split(m[1], ",") {
			listed = append(listed, strings.TrimSpace(v))
		}
		want := constantsOf(t, "api/job.go", typ)
		slices.Sort(listed)
		slices.Sort(want)
		if !slices.Equal(listed, want) {
			t.Errorf("docs/operations.md lists %s as %v; the contract has %v", field, listed, want)
		}
	}
}
