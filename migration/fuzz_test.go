package migration

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.uber.org/zap"
)

// The post-copy failure ledger as a crash or a full disk may leave it:
// loading never panics, keeps within its bounds, and what it keeps is
// found by its key and reads back the same once written again.
func FuzzLedgerLoad(f *testing.F) {
	f.Add([]byte(`[{"socket":"/run/libvirt/libvirt-sock","domain":"ns_vm","uuid":"u1","role":"source","detected":"2026-11-29T12:00:00Z"}]`))
	f.Add([]byte(`[{"socket":"s","uuid":"u","role":"target"},{"socket":"s","uuid":"u","role":"target"}]`))
	f.Add([]byte(`[{"detected":"not a time"}]`))
	f.Add([]byte(`{"socket":"s"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ledgerFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		l := openLedger(dir, zap.NewNop())
		if len(l.recs) > maxLedger {
			t.Fatalf("kept %d records, over %d", len(l.recs), maxLedger)
		}
		for _, r := range l.recs {
			if !l.known(r.key()) {
				t.Fatalf("record %+v kept but not known by its key", r)
			}
		}
		l.seq++
		l.write(l.snapshot())
		again := openLedger(dir, zap.NewNop())
		if len(l.recs) > 0 && !reflect.DeepEqual(again.recs, l.recs) {
			t.Fatalf("written and read again:\n%+v\n%+v", l.recs, again.recs)
		}
	})
}
