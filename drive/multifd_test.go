package drive

import (
	"strings"
	"testing"

	"github.com/ferry-vm/ferry/migration/policy"
)

// Multifd with post-copy is refused at the request, and after the
// policy, which may be what asks for post-copy.
func TestMultifdWithPostCopyIsRefused(t *testing.T) {
	base := MigrateRequest{Domain: "vm", Target: "10.0.0.2:9475", PostCopy: true}
	for _, r := range []MigrateRequest{
		func() MigrateRequest { r := base; r.Parallel = 2; return r }(),
		func() MigrateRequest { r := base; r.Parallel, r.Compression = 2, "zstd"; return r }(),
		func() MigrateRequest {
			r := base
			r.PostCopy, r.PostCopyAfterSeconds, r.Parallel = false, 5, 1
			return r
		}(),
	} {
		s := &Source{cfg: SourceConfig{AllowAnyTarget: true, Policy: policy.Defaults()}}
		if _, _, err := s.effective(r); err == nil || !strings.Contains(err.Error(), "cannot be had with post-copy") {
			t.Errorf("%+v: %v; want multifd with post-copy refused", r, err)
		}
	}
	if why := multifdWithPostCopy(true, false); why != "" {
		t.Errorf("multifd alone refused: %s", why)
	}
}
