// Command gen writes Ferry's Grafana dashboard to the file it is given.
package main

import (
	"fmt"
	"os"

	"github.com/ferry-vm/ferry/deploy/dashboard"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE")
		os.Exit(2)
	}
	b, err := dashboard.JSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen: building the dashboard:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
