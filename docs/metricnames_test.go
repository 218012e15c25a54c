package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ferry-vm/ferry/metrics"
)

// metricName is a whole metric name as the documents write it.
var metricName = regexp.MustCompile(`\bferry_[a-z0-9_]*[a-z0-9]\b`)

// An operator copies a metric's name from the documents into a query: each
// one named must be one ferryd serves.
func TestDocumentsNameOnlyServedMetrics(t *testing.T) {
	for _, doc := range documents(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricName.FindAllString(string(b), -1) {
			if _, ok := metrics.Lookup(name); !ok {
				t.Errorf("%s names %s, which ferryd does not serve", doc, name)
			}
		}
	}
}
