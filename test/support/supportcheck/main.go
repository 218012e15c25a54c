// Command supportcheck compares the cells an end-to-end run wrote (its
// FERRY_SUPPORT_DIR) with docs/support.json, which docs/support.md's
// matrix is rendered from, and fails naming each cell that differs; with
// -update it writes the run's cells there instead (then make generate
// renders the matrix).
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ferry-vm/ferry/test/support"
)

const kept = "docs/support.json"

func main() {
	update := flag.Bool("update", false, "write the run's cells to "+kept)
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: supportcheck [-update] RUN_DIR\n\nCompares the cells an end-to-end run wrote into RUN_DIR with %s.\n", kept)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *update); err != nil {
		fmt.Fprintln(os.Stderr, "supportcheck:", err)
		os.Exit(1)
	}
}

func run(dir string, update bool) error {
	ran, err := support.ReadDir(dir)
	if err != nil {
		return err
	}
	if err := support.Check(ran); err != nil {
		return err
	}
	if update {
		if missing := lostColumns(ran); len(missing) > 0 {
			return fmt.Errorf("this run has no cells of %s, which %s has: a partial run would drop them (run make e2e and make e2e-stacks into %s)", strings.Join(missing, ", "), kept, dir)
		}
		if err := support.Write(kept, ran); err != nil {
			return err
		}
		fmt.Printf("supportcheck: %d cells written to %s; make generate renders docs/support.md from it\n", len(ran), kept)
		return nil
	}
	want, err := support.Read(kept)
	if err != nil {
		return err
	}
	if diff := support.Diff(ran, want); len(diff) > 0 {
		for _, d := range diff {
			fmt.Fprintln(os.Stderr, "  "+d)
		}
		return fmt.Errorf("docs/support.md is not what this run showed (%d cells differ): if the run is right, make support-update", len(diff))
	}
	fmt.Printf("supportcheck: the run showed the %d cells docs/support.md says\n", len(ran))
	return nil
}

// lostColumns are the columns the kept cells have and the run has not.
func lostColumns(ran []support.Cell) []string {
	old, err := support.Read(kept)
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range old {
		if !slices.ContainsFunc(ran, func(r support.Cell) bool { return r.Column == c.Column }) && !slices.Contains(out, c.Column) {
			out = append(out, c.Column)
		}
	}
	return out
}
