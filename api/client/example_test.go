package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/api/client"
)

func Example() {
	c, stop := cannedFerryd()
	defer stop()
	// On a node: c := client.New("/run/ferry/ferry.sock")
	resp, err := c.Jobs(context.Background(), false)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, j := range resp.Jobs {
		fmt.Printf("%s on %s: %s %s, %.0f%%\n", j.Domain, resp.Node, j.Role, j.Phase, j.ProgressPercent)
	}
	// Output:
	// ferryd got GET /v1/jobs
	// vm1 on node-a: source Running, 62%
}

func ExampleClient_Jobs() {
	c, stop := cannedFerryd()
	defer stop()
	resp, _ := c.Jobs(context.Background(), true)
	for _, j := range resp.Jobs {
		fmt.Println(j.Domain, j.Phase)
	}
	// Output:
	// ferryd got GET /v1/jobs?all=1
	// vm1 Running
	// vm0 Completed
}

// ferryd's refusals are *client.Error: its message, and the HTTP status
// that says which kind of no it is.
func ExampleClient_Job() {
	c, stop := cannedFerryd()
	defer stop()
	j, err := c.Job(context.Background(), "vm1")
	fmt.Println(j.Domain, j.Mode, "pass", j.Iteration, err)

	_, err = c.Job(context.Background(), "vm9")
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		fmt.Println("no job:", e.Message)
	}
	// Output:
	// ferryd got GET /v1/jobs/vm1
	// vm1 PreCopy pass 3 <nil>
	// ferryd got GET /v1/jobs/vm9
	// no job: no migration job for domain "vm9" on node node-a (in flight or in history)
}

// Where two libvirt sockets serve a domain of one name, ferryd needs to be
// told which: every domain request then names it.
func ExampleClient_WithLibvirtSocket() {
	c, stop := cannedFerryd()
	defer stop()
	pod := c.WithLibvirtSocket("/var/lib/kubelet/pods/bbbb/virtqemud-sock")
	pod.Job(context.Background(), "vm1")
	pod.Migrate(context.Background(), api.MigrateRequest{Domain: "vm1", Target: "10.0.0.2:9475", TargetNode: "node-b"}, nil)
	// Output:
	// ferryd got GET /v1/jobs/vm1?socket=%2Fvar%2Flib%2Fkubelet%2Fpods%2Fbbbb%2Fvirtqemud-sock
	// ferryd got POST /v1/migrations {"domain":"vm1","socket":"/var/lib/kubelet/pods/bbbb/virtqemud-sock","target":"10.0.0.2:9475","targetNode":"node-b"}
}

// A domain's name is one path segment, however it is spelled.
func ExampleClient_Job_escapedName() {
	c, stop := cannedFerryd()
	defer stop()
	_, err := c.Job(context.Background(), "ns/vm 1")
	fmt.Println(err)
	// Output:
	// ferryd got GET /v1/jobs/ns%2Fvm%201
	// no migration job for domain "ns/vm 1" on node node-a (in flight or in history)
}

func ExampleClient_Domains() {
	c, stop := cannedFerryd()
	defer stop()
	resp, _ := c.Domains(context.Background(), true)
	for _, d := range resp.Domains {
		fmt.Println(d.Name, d.State, "can move:", *d.Migratable)
	}
	// Output:
	// ferryd got GET /v1/domains?check=1
	// vm1 running can move: true
}

func ExampleClient_Check() {
	c, stop := cannedFerryd()
	defer stop()
	resp, _ := c.Check(context.Background(), "vm1")
	fmt.Println(resp.Domain, "migratable:", resp.Migratable)
	for _, b := range resp.Blockers {
		fmt.Printf("%s %s %s: %s\n", b.Severity, b.Code, b.Device, b.Message)
	}
	// Output:
	// ferryd got GET /v1/domains/vm1/check
	// vm1 migratable: false
	// blocks hostdev_pci 0000:03:00.0: a PCI device is passed through
}

func ExampleClient_DryRun() {
	c, stop := cannedFerryd()
	defer stop()
	resp, _ := c.DryRun(context.Background(), "vm1", api.DryRunRequest{Target: "10.0.0.2:9475", TargetNode: "node-b"})
	fmt.Println(resp.Migratable, resp.DryRun.OK, resp.DryRun.CPU)
	// Output:
	// ferryd got POST /v1/domains/vm1/check {"target":"10.0.0.2:9475","targetNode":"node-b"}
	// true true identical
}

func ExampleClient_Plan() {
	c, stop := cannedFerryd()
	defer stop()
	p, _ := c.Plan(context.Background(), api.PlanRequest{Targets: []string{"node-b", "node-c"}})
	for _, e := range p.Entries {
		fmt.Printf("%d %s -> %s: %s in %d passes, %.1fs\n", e.Order, e.Domain, e.Target, e.Prediction.Strategy, e.Prediction.Passes, e.Prediction.Seconds)
	}
	// Output:
	// ferryd got GET /v1/plan?bandwidthMiBs=0&parallel=0&to=node-b%2Cnode-c
	// 1 vm1 -> node-b: pre-copy in 4 passes, 9.5s
}

// An evacuation starts, then is followed until it ends.
func ExampleClient_Evacuate() {
	c, stop := cannedFerryd()
	defer stop()
	ctx := context.Background()
	ev, err := c.Evacuate(ctx, api.PlanRequest{Targets: []string{"node-b"}})
	for err == nil && ev.Running {
		// A real caller waits a second or so between reads.
		ev, err = c.Evacuation(ctx)
	}
	fmt.Printf("moved %d, failed %d, in %.1fs (predicted %.1fs)\n", ev.Moved, ev.Failed, ev.RealSeconds, ev.PredictedSeconds)
	// Output:
	// ferryd got POST /v1/evacuations {"targets":["node-b"]}
	// ferryd got GET /v1/evacuation
	// moved 1, failed 0, in 11.2s (predicted 9.5s)
}

// A watch is read update by update until the job awaited ends.
func ExampleClient_Watch() {
	c, stop := cannedFerryd()
	defer stop()
	s, err := c.Watch(context.Background(), "vm1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for s.Next() {
		j := s.Job()
		fmt.Printf("%s %s %.0f%%\n", j.Domain, j.Phase, j.ProgressPercent)
		if j.Phase.Finished() {
			break
		}
	}
	if err := s.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// ferryd got GET /v1/watch?domain=vm1
	// vm1 Running 62%
	// vm1 Running 88%
	// vm1 Completed 100%
}

// A post-copy migration cannot be cancelled, only paused: ferryd refuses
// (409) unless forced.
func ExampleClient_Abort() {
	c, stop := cannedFerryd()
	defer stop()
	_, err := c.Abort(context.Background(), "vm1", false)
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusConflict {
		fmt.Println("refused:", strings.SplitN(e.Message, ":", 2)[0])
	}
	res, _ := c.Abort(context.Background(), "vm1", true)
	fmt.Println(res.Message, res.Job.AbortStatus)
	// Output:
	// ferryd got POST /v1/jobs/vm1/abort
	// refused: post-copy cannot be cancelled
	// ferryd got POST /v1/jobs/vm1/abort?force=1
	// forced abort in post-copy: the migration is being paused Aborting
}

func ExampleClient_PostCopy() {
	c, stop := cannedFerryd()
	defer stop()
	res, _ := c.PostCopy(context.Background(), "vm1")
	fmt.Println(res.Job.Mode, res.Message)
	// Output:
	// ferryd got POST /v1/jobs/vm1/postcopy
	// PostCopy switching to post-copy: the target now runs the guest and pulls the remaining pages on demand
}

func ExampleClient_Resolve() {
	c, stop := cannedFerryd()
	defer stop()
	_, err := c.Resolve(context.Background(), "vm1", client.KeepSource)
	fmt.Println(err)
	// Output:
	// ferryd got POST /v1/jobs/vm1/resolve?keep=source
	// no migration of vm1 driven from this node is in doubt (or two sockets serve that name: add ?socket=)
}

func ExampleClient_Recover() {
	c, stop := cannedFerryd()
	defer stop()
	res, _ := c.Recover(context.Background(), "vm1")
	fmt.Println(res.Message)
	res, _ = c.GiveUp(context.Background(), "vm1")
	fmt.Println(res.Message)
	// Output:
	// ferryd got POST /v1/jobs/vm1/recover
	// the recovery of vm1's post-copy tries again now
	// ferryd got POST /v1/jobs/vm1/give-up
	// the recovery of vm1's post-copy is given up
}

// What the migration waits for before it starts comes before the answer.
func ExampleClient_Migrate() {
	c, stop := cannedFerryd()
	defer stop()
	req := api.MigrateRequest{Domain: "vm1", Target: "10.0.0.2:9475", TargetNode: "node-b", PostCopy: true}
	resp, err := c.Migrate(context.Background(), req, func(msg string) { fmt.Println("queued:", msg) })
	fmt.Println(resp.MigrationID, resp.Message, err)
	// Output:
	// ferryd got POST /v1/migrations {"domain":"vm1","target":"10.0.0.2:9475","targetNode":"node-b","postCopy":true} (Ferry-Queued: 1)
	// queued: waiting for one of this node's 2 outbound migration slots: 1 ahead
	// m-7 migration started <nil>
}

func ExampleClient_Proxy() {
	c, stop := cannedFerryd()
	defer stop()
	resp, _ := c.Proxy(context.Background())
	fmt.Println(resp.Enabled, resp.TLS, resp.SocketDir, len(resp.Registered))
	// Output:
	// ferryd got GET /v1/proxy
	// true true /run/ferry/proxy 0
}

// A socket that cannot be used is told from a refusal, and says why.
func ExampleUnreachableError() {
	dir, _ := os.MkdirTemp("", "ferryd")
	defer os.RemoveAll(dir)
	c := client.New(filepath.Join(dir, "ferry.sock"))
	_, err := c.Jobs(context.Background(), false)
	var un *client.UnreachableError
	if errors.As(err, &un) {
		fmt.Println(strings.ReplaceAll(un.Error(), dir, "$DIR"))
	}
	// Output:
	// cannot reach ferryd: its debug socket $DIR/ferry.sock does not exist: ferryd is not running on this node, or it serves another path (point ferryctl at ferryd's --debug-socket with --socket or FERRY_SOCKET)
}
