package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// sinkMain plays the target QEMU: it reads and discards a set number of
// stream connections, then tells the writer how many bytes arrived. It
// serves one transfer and exits.
func sinkMain(args []string) error {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	data := fs.String("data", "", "tcp:HOST:PORT or unix:PATH the stream arrives at")
	control := fs.String("control", "", "host:port the writer connects to for the confirmation")
	conns := fs.Int("conns", 1, "stream connections to expect")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dl, err := listenEndpoint(*data)
	if err != nil {
		return err
	}
	defer dl.Close()
	// Listening on control last: the orchestrator takes it as "ready".
	cl, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	ctl, err := cl.Accept()
	cl.Close()
	if err != nil {
		return err
	}
	defer ctl.Close()

	var got atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range *conns {
		c, err := dl.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if err := drain(c, &got); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(ctl, "error: %v\n", err)
		return err
	}
	_, err = fmt.Fprintf(ctl, "%d\n", got.Load())
	return err
}

// drain reads like a receiving QEMU does, into memory, rather than splicing
// to /dev/null, so the sink costs the same in every variant as it would in
// a migration.
func drain(c net.Conn, got *atomic.Int64) error {
	buf := make([]byte, 1<<20)
	for {
		n, err := c.Read(buf)
		got.Add(int64(n))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
