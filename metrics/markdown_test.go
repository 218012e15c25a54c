package metrics

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// updating says whether the generated files are written rather than
// compared: FERRY_UPDATE_DOCS=1 (make generate).
func updating() bool { return os.Getenv("FERRY_UPDATE_DOCS") == "1" }

func TestMetricsDocIsCurrent(t *testing.T) {
	path := filepath.Join("..", filepath.FromSlash(docPath))
	want := markdown()
	if updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", docPath)
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v; run make generate", docPath, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the declarations in metrics/: run make generate (FERRY_UPDATE_DOCS=1 go test -run DocIsCurrent ./metrics/)", docPath)
	}
}
