package proxy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/peer"
)

// With the store full (every node, after 4096 migrations: nothing
// expires), each new record re-reads and parses every record under the
// store's lock; a finish's own record, and every load, wait behind it.
func TestAttackFullStoreMakesEverySaveSlow(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < maxOutcomeRecords; i++ {
		r := outcomeRecord{ID: fmt.Sprintf("flood%08d", i), Owner: "peer", Domain: "junk", Prepared: time.Now(), Result: &peer.ControlResponse{Outcome: peer.OutcomeStopped}}
		b, _ := json.Marshal(r)
		os.WriteFile(filepath.Join(dir, r.ID+".json"), b, 0o600)
	}
	s, err := openOutcomes(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A flooding peer's eight prepares at once, and one honest finish.
	var wg sync.WaitGroup
	for w := 0; w < MaxIncomingPerPeer; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.save(outcomeRecord{ID: fmt.Sprintf("new%08d", w), Domain: "x", Prepared: time.Now()})
		}()
	}
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	s.save(outcomeRecord{ID: "honest0000000001", Owner: "honest", Domain: "vm", Finishing: true, Prepared: time.Now()})
	took := time.Since(start)
	wg.Wait()
	t.Logf("an honest finish's record took %v behind one peer's %d prepares", took, MaxIncomingPerPeer)
	if took > 500*time.Millisecond {
		t.Fatalf("an honest finish's record waited %v on the store's lock", took)
	}
}
