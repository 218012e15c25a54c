package kubevirt

import (
	"os"
	"path/filepath"
	"testing"
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
