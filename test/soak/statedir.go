package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// What ferryd keeps in its --state-dir (daemon/daemon.go, drive/,
// proxy/outcomes.go, migration/ledger.go, migration/kubevirt/store.go),
// and when a record of it is live once every migration has ended:
//
//   - driven-migrations/<id>.json: a migration this node drives, from
//     before its Perform until it has ended; live only while it runs, or
//     while a post-copy whose recovery an operator gave up is held.
//   - incoming-migrations/<id>.json: each migration prepared here, with
//     the finish's answer once given, so a source that lost the answer
//     hears it again; a history by design, pruned past 4096 records.
//   - postcopy-failed.json: the post-copy failures recorded whose guests
//     still sit failed here; live only while the guest does.
//   - kept-definitions/<uuid>.json: a persistent guest's definition left
//     here when it moved (the soak's guests are transient: none).
//   - marks/: KubeVirt marks waiting for the API server (no API server
//     here: none).

// stateDirReport lists each node's state dir, and what in it is stale.
func (s *soak) stateDirReport(held map[string]string) (lines, stale []string) {
	for _, n := range nodes {
		dir := filepath.Join(s.bed.Node(n).Dir, "state")
		counts := map[string]int{}
		var unanswered, finishing int
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			top, _, _ := strings.Cut(rel, string(filepath.Separator))
			counts[top]++
			switch {
			case strings.HasSuffix(rel, ".corrupt") || strings.HasSuffix(rel, ".tmp"):
				stale = append(stale, fmt.Sprintf("node %s: %s: set aside or half written", n, rel))
			case top == "driven-migrations":
				var r struct {
					Domain  string `json:"domain"`
					GivenUp bool   `json:"givenUp"`
				}
				readJSON(path, &r)
				stale = append(stale, fmt.Sprintf("node %s: %s: the record of a driven migration of %q (given up: %v), and no migration runs", n, rel, r.Domain, r.GivenUp))
			case top == "incoming-migrations":
				var r struct {
					Finishing bool            `json:"finishing"`
					Result    json.RawMessage `json:"result"`
				}
				readJSON(path, &r)
				if len(r.Result) == 0 || string(r.Result) == "null" {
					unanswered++
					if r.Finishing {
						finishing++
					}
				}
			case top == "postcopy-failed.json":
				var recs []struct {
					Domain string `json:"domain"`
					Role   string `json:"role"`
				}
				readJSON(path, &recs)
				for _, r := range recs {
					if held[n+"/"+r.Domain] == "" {
						stale = append(stale, fmt.Sprintf("node %s: postcopy-failed.json records %s's post-copy failure (%s), and libvirt there holds no failed copy of it", n, r.Domain, r.Role))
					}
				}
			case top == "kept-definitions" || top == "marks":
				stale = append(stale, fmt.Sprintf("node %s: %s: the soak's guests are transient and no API server runs", n, rel))
			default:
				stale = append(stale, fmt.Sprintf("node %s: %s: not a record ferryd is known to keep", n, rel))
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			stale = append(stale, fmt.Sprintf("node %s: reading %s: %v", n, dir, err))
		}
		var parts []string
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
		}
		if len(parts) == 0 {
			parts = append(parts, "empty")
		}
		lines = append(lines, fmt.Sprintf("  node %s (%s): %s", n, dir, strings.Join(parts, ", ")))
		if counts["incoming-migrations"] > 0 {
			lines = append(lines, fmt.Sprintf("    incoming-migrations is a history by design (pruned past 4096): %d without a finish's answer (migrations that failed or were cancelled before it), %d of them with a finish begun and never answered",
				unanswered, finishing))
		}
	}
	return lines, stale
}

func readJSON(path string, v any) {
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, v)
	}
}
