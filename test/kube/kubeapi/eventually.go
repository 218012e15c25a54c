package kubeapi

import (
	"context"
	"testing"
	"time"
)

// Eventually retries f every 100 ms until it returns nil or ctx ends, for
// state the API server applies asynchronously (RBAC caches, event sinks,
// informers); it fails the test with f's last error.
func Eventually(t testing.TB, ctx context.Context, what string, f func() error) {
	t.Helper()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
