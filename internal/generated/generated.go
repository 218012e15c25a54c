// Package generated keeps a file made from the code equal to what the code
// makes now: a test renders it and calls Check, which compares, or under
// FERRY_UPDATE_DOCS=1 (make generate) writes it. For tests only.
package generated

import (
	"bytes"
	"os"
	"testing"
)

// Check fails t while the file at path, what is named from, differs from
// want; under FERRY_UPDATE_DOCS=1 it writes want there instead.
func Check(t testing.TB, path string, want []byte, from string) {
	t.Helper()
	if os.Getenv("FERRY_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: regenerate it with make generate", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what %s makes: regenerate it with make generate and commit it", path, from)
	}
}
