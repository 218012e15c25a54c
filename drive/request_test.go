package drive

import (
	"math"
	"testing"
	"time"

	"github.com/ferry-vm/ferry/migration/policy"
)

// A request may lower the node's downtime cap, never raise it, whatever
// number it sends.
func TestARequestOnlyLowersTheDowntimeCap(t *testing.T) {
	node := policy.Defaults() // 500 ms
	for _, tc := range []struct {
		askedMs uint64
		want    time.Duration
	}{
		{0, 500 * time.Millisecond},
		{200, 200 * time.Millisecond},
		{500, 500 * time.Millisecond},
		{900, 500 * time.Millisecond},
		{math.MaxUint64, 500 * time.Millisecond}, // past what a duration holds
	} {
		p, err := migrationPolicy(node, MigrateRequest{MaxDowntimeMs: tc.askedMs})
		if err != nil || p.MaxDowntime != tc.want {
			t.Errorf("asked %d ms: cap %v, %v; want %v", tc.askedMs, p.MaxDowntime, err, tc.want)
		}
	}
}
