package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// writeResult is what the writer hands the orchestrator on stdout.
type writeResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// writeMain plays the source QEMU: it writes the stream into the socket the
// variant offers and times it until the sink confirms the last byte.
func writeMain(args []string) error {
	fs := flag.NewFlagSet("write", flag.ContinueOnError)
	to := fs.String("to", "", "tcp:HOST:PORT or unix:PATH to write into")
	control := fs.String("control", "", "the sink's control address (host:port)")
	total := fs.Int64("bytes", 2<<30, "bytes to write, spread over the connections")
	conns := fs.Int("conns", 1, "parallel connections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	network, addr, err := splitEndpoint(*to)
	if err != nil {
		return err
	}
	if *conns < 1 || *total < int64(*conns) {
		return errors.New("need at least one connection and one byte per connection")
	}
	// The confirmation travels apart from the data: a KubeVirt-style relay
	// closes both directions when the writer finishes, so nothing could
	// come back over the stream itself.
	ctl, err := net.Dial("tcp", *control)
	if err != nil {
		return fmt.Errorf("sink control: %w", err)
	}
	defer ctl.Close()
	data := make([]net.Conn, *conns)
	for i := range data {
		if data[i], err = net.Dial(network, addr); err != nil {
			return fmt.Errorf("data connection %d: %w", i, err)
		}
		defer data[i].Close()
	}
	// Random rather than zero bytes, so no layer could get away with less work.
	buf := make([]byte, 256<<10)
	for i := range buf {
		buf[i] = byte(rand.Uint32())
	}

	start := time.Now()
	errs := make(chan error, len(data))
	var wg sync.WaitGroup
	for i, c := range data {
		n := *total / int64(len(data))
		if i == 0 {
			n += *total % int64(len(data))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- writeN(c, buf, n)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	line, err := bufio.NewReader(ctl).ReadString('\n')
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("no confirmation from the sink: %w", err)
	}
	line = strings.TrimSpace(line)
	got, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return fmt.Errorf("sink: %s", line)
	}
	if got != *total {
		return fmt.Errorf("sink received %d bytes, %d were written", got, *total)
	}
	return json.NewEncoder(os.Stdout).Encode(writeResult{Bytes: got, Seconds: elapsed.Seconds()})
}

func writeN(c net.Conn, buf []byte, n int64) error {
	for n > 0 {
		b := buf
		if int64(len(b)) > n {
			b = b[:n]
		}
		w, err := c.Write(b)
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		n -= int64(w)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
