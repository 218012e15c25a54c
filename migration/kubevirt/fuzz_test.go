package kubevirt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Pending mark files, as a crash or a disk left them: never a panic, and
// only a valid mark of its own file name is taken.
func FuzzStoreLoad(f *testing.F) {
	f.Add("irrecoverable_default_vm_1", `{"id":"irrecoverable_default_vm_1","kind":"irrecoverable","namespace":"default","name":"vm"}`)
	f.Add("irrecoverable_x_1", `{"id":"../../etc/x","kind":"irrecoverable","namespace":"/etc","name":"vm"}`)
	f.Add("x", `{`)
	f.Fuzz(func(t *testing.T, name, body string) {
		if checkID(name) != nil {
			return
		}
		s, err := newStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, name+".json"), []byte(body), 0o600); err != nil {
			return
		}
		marks, _ := s.load()
		for _, m := range marks {
			if err := m.validate(); err != nil || checkID(m.ID) != nil || m.ID != name {
				t.Fatalf("took %+v from %s.json: %v", m, name, err)
			}
		}
	})
}

// VMI objects as the API server hands them over, whoever wrote their
// status and metadata: reading one never panics (nor does the advice
// from it, with the object read as KubeVirt CR and policy too), and a
// mark's patch is JSON that leaves the VMI marked by that mark.
func FuzzVMIObject(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"vm1","namespace":"default","uid":"u","resourceVersion":"7"},"status":{"activePods":{"p":"a"},"migrationState":{"migrationUid":"m","completed":"yes"},"conditions":[{"type":"EvictionRequested","status":"True"},7]}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"ferry-vm.io/migration-failure":"{\"node\":1}"}},"status":{"migrationState":[]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"ferry-vm.io/migration-irrecoverable":"true"}},"status":null}`))
	f.Add([]byte(`{"metadata":{"labels":{"a":"b"}},"spec":{"evictionStrategy":"LiveMigrate","selectors":{"virtualMachineInstanceSelector":{"a":"b"},"namespaceSelector":null},"bandwidthPerMigration":-5,"configuration":{"migrations":{"bandwidthPerMigration":"1e400","maxDowntimeMs":-1}}},"status":{"conditions":[{"type":"LiveMigratable","status":false}],"migrationState":{"migrationConfiguration":{"bandwidthPerMigration":1e300,"completionTimeoutPerGiB":1.5}}}}`))
	m := &Mark{Namespace: "default", Name: "vm1", Node: "b", Role: "target", Detected: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Reason: "cut"}
	f.Fuzz(func(t *testing.T, b []byte) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return
		}
		infoFrom(u)
		EffectiveMigration(u, u, []*unstructured.Unstructured{u}, u.GetLabels())
		DrainBlocker(u, u)
		patch, done, err := irrecoverablePatch(u, m)
		if err != nil || done {
			return
		}
		var applied unstructured.Unstructured
		var p struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch, &p); err != nil {
			t.Fatalf("patch is not JSON: %v: %s", err, patch)
		}
		applied.SetAnnotations(p.Metadata.Annotations)
		if !markedBy(&applied, m) {
			t.Fatalf("the patch %s does not read back as the mark's", patch)
		}
	})
}
