package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/ferry-vm/ferry/api"
)

// watchCmd follows job updates. On a terminal it redraws one progress line
// per job in place; elsewhere (logs, pipes) it prints a line per update.
// With a NAME it returns when that domain's job ends, failing unless it
// completed; -o json prints the raw NDJSON stream, -o yaml a YAML document
// per update.
func watchCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "watch [NAME]",
		Short: "live progress of jobs (of NAME only, exiting when it ends)",
		Long: "watch shows each job's overall progress, which never goes down, and the current pass over\n" +
			"guest memory (\"pass 4: 62% of 113.0 MiB\"). On a terminal the lines are redrawn in place;\n" +
			"piped, each update is a line. With NAME it exits when that migration ends: 0 if it completed, 1 if not.",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError("watch takes at most one domain name (usage: watch [NAME])")
			}
			return nil
		},
		ValidArgsFunction: completeDomains(g),
		RunE: runE(func(ctx context.Context, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return watchJobs(ctx, g, name, nil)
		}),
	}
}

// printDoc prints one update of a structured watch: the line as ferryd sent
// it for json, a YAML document for yaml.
func printDoc(g *globals, line []byte) error {
	if g.output == "json" {
		_, err := fmt.Fprintf(g.out, "%s\n", line)
		return err
	}
	y, err := yaml.JSONToYAML(line)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.out, "---\n%s", y)
	return err
}

// watchJobs streams updates; once the stream is open, ended (if given) says
// whether the awaited job already ended before it opened.
func watchJobs(ctx context.Context, g *globals, name string, ended func() *api.Job) error {
	s, err := g.client.Watch(ctx, name)
	if err != nil {
		return err
	}
	defer s.Close()

	tty := isTerminal(g.out)
	if name != "" && !g.structured() {
		fmt.Fprintf(g.out, "watching migrations of %s (Ctrl-C to stop)\n", clean(name))
	}
	if ended != nil {
		if j := ended(); j != nil {
			if g.structured() {
				if err := emit(g, j, nil); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(g.out, summaryLine(*j))
			}
			if j.Phase != api.PhaseCompleted {
				return failedJob{j.Phase}
			}
			return nil
		}
	}
	jobs := map[string]api.Job{}
	drawn := 0
	for s.Next() {
		j := s.Job()
		if g.structured() {
			if err := printDoc(g, s.Raw()); err != nil {
				return err
			}
		} else if tty {
			jobs[j.Domain+"/"+string(j.Role)] = j
			drawn = redraw(g.out, jobs, drawn)
			if j.Phase.Finished() {
				// Finished jobs leave the live area for a permanent summary.
				delete(jobs, j.Domain+"/"+string(j.Role))
				clearLines(g.out, drawn)
				fmt.Fprintln(g.out, summaryLine(j))
				drawn = redraw(g.out, jobs, 0)
			}
		} else if j.Phase.Finished() {
			fmt.Fprintln(g.out, summaryLine(j))
		} else {
			fmt.Fprintln(g.out, progressLine(j, 30))
		}
		if name != "" && j.Domain == name && j.Phase.Finished() {
			if j.Phase != api.PhaseCompleted {
				return failedJob{j.Phase}
			}
			return nil
		}
	}
	// ctx ended, an update was unreadable, or ferryd went away (an
	// *UnreachableError, exit 3).
	return s.Err()
}

func redraw(w io.Writer, jobs map[string]api.Job, drawn int) int {
	clearLines(w, drawn)
	keys := make([]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintln(w, progressLine(jobs[k], 30))
	}
	return len(keys)
}

func clearLines(w io.Writer, n int) {
	fmt.Fprint(w, strings.Repeat("\x1b[1A\x1b[2K", n))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
