package metrics

import (
	"path/filepath"
	"testing"

	"github.com/ferry-vm/ferry/internal/generated"
)

// docs/metrics.md is what the declarations in this package say.
func TestMetricsDocIsCurrent(t *testing.T) {
	generated.Check(t, filepath.Join("..", filepath.FromSlash(docPath)), markdown(), "package metrics")
}
