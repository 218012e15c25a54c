package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
)

// profileEnv names the directory relays write CPU profiles to (run's
// -cpuprofile); each relay process writes its own, named for its role.
const profileEnv = "PROXYBENCH_CPUPROFILE"

// profileRelay starts a CPU profile of this relay process when run asked
// for profiles, and writes it out when the orchestrator stops the relay.
func profileRelay(role string) error {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		pprof.StopCPUProfile()
		f.Close()
		os.Exit(0)
	}()
	return nil
}
