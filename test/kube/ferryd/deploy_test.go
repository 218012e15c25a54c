//go:build kube

package ferryd_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/test/kube/kubeapi"
)

// TestDeployPassesServerSideDryRun applies all of deploy/, in kustomization order, as
// a dry run (the namespace and RBAC are applied for real by TestMain).
func TestDeployPassesServerSideDryRun(t *testing.T) {
	ctx := kubeapi.Context(t, time.Minute)
	if err := srv.InstallMonitoringCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(repoRoot, "deploy")
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var all []byte
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization lists %s: %v", r, err)
		}
		all = append(append(all, b...), "\n---\n"...)
	}
	if err := srv.Apply(ctx, all, true); err != nil {
		t.Fatalf("deploy/ does not pass server-side dry-run: %v", err)
	}
}
