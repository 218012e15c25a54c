// Command proxybench compares the throughput and relay CPU cost of Ferry's
// migration proxy with raw TCP, socat and a KubeVirt-style relay, over a veth
// between two network namespaces it creates. Run it as root; "run" (the
// default) orchestrates, the other subcommands are the processes it starts
// inside the namespaces.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

var subcommands = map[string]func(args []string) error{
	"run":          runMain,
	"write":        writeMain,
	"sink":         sinkMain,
	"kv-source":    kvSourceMain,
	"kv-target":    kvTargetMain,
	"ferry-source": ferrySourceMain,
	"ferry-target": ferryTargetMain,
}

const usage = `usage: proxybench [run] [-bytes 2GiB] [-runs 3] [-parallel 4] [-variants list] [-o text|json]

internal subcommands, started by run inside the namespaces:
  write, sink, kv-source, kv-target, ferry-source, ferry-target
`

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	sub, ok := subcommands[cmd]
	if !ok {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err := sub(args); err != nil {
		fmt.Fprintf(os.Stderr, "proxybench %s: %v\n", cmd, err)
		if errors.Is(err, errInterrupted) {
			os.Exit(130) // as a shell reports an interrupted command
		}
		os.Exit(1)
	}
}
