package metrics

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-vm/ferry/internal/generated"
)

// updating says whether the generated files are written rather than
// compared: FERRY_UPDATE_DOCS=1 (make generate).
func updating() bool { return os.Getenv("FERRY_UPDATE_DOCS") == "1" }

func TestMetricsDocIsCurrent(t *testing.T) {
	generated.Check(t, filepath.Join("..", filepath.FromSlash(docPath)), markdown(), "package metrics")
}
