package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// vmiUIDs holds the VMI UID in each KubeVirt domain's metadata, read once
// per domain in the background: ferry_domain_active carries it so that a
// VMI the API server expects can be matched to its domain on any node,
// and a scrape never calls libvirt.
//
// Every launcher pod serves its own libvirt, so any pod can make the calls
// on its socket hang. Reads therefore run side by side, a few at a time and
// one per socket, so a socket that hangs delays only its own domains; one
// that let a read time out is asked again only after a backoff, and such
// sockets share a part of the slots, so that hostile pods cannot keep the
// slots the others need.
type vmiUIDs struct {
	domains func() []api.Domain
	read    func(ctx context.Context, socket, domain, uuid string) (string, error)
	pace    uidPace

	mu      sync.Mutex
	known   map[uidKey]uidRead
	sockets map[string]*uidSocket
	// reading counts the reads waited on, readingSuspect those of them on
	// sockets that let one time out.
	reading, readingSuspect int
	// held is done when no read is waited on any more: run returns only
	// then, so none of its waits outlives it.
	held sync.WaitGroup
	// freed wakes run when a slot comes free, so that a domain left over
	// takes it then rather than at the next tick.
	freed chan struct{}
}

// uidKey is one domain: the UUID tells a guest started again under the
// same name on the same socket from the one read before.
type uidKey struct{ socket, domain, uuid string }

type uidRead struct {
	uid  string
	done bool
	// retry is when a read that failed is tried again.
	retry time.Time
}

// uidSocket is what the reader knows of one libvirt socket.
type uidSocket struct {
	// busy while a read on it has not returned, even one no longer waited
	// on: a read that outlives its context still holds a goroutine, and
	// asking again would add one per round.
	busy bool
	// timeouts counts its reads in a row that libvirt did not answer in
	// time; quiet is when it may be asked again after the last of them.
	timeouts int
	quiet    time.Time
}

// uidPace is how often, how long and how many reads run.
type uidPace struct {
	every time.Duration // between rounds
	limit time.Duration // a read is waited on
	retry time.Duration // after a failed read, and the first backoff
	// backoffMax caps the backoff, and is how long a socket that timed
	// out is remembered once it lists no domain: hiding its domains a
	// while must not wipe its backoff.
	backoffMax time.Duration
	slots      int // reads waited on at once
	suspects   int // of them, on sockets that timed out before
}

var defaultUIDPace = uidPace{
	every:      2 * time.Second,
	limit:      2 * time.Second,
	retry:      30 * time.Second,
	backoffMax: 10 * time.Minute,
	slots:      8,
	suspects:   2,
}

// backoff is how long a socket rests after its timeouts-th in a row:
// doubling, so that a pod that always hangs costs a slot ever more rarely.
// So too the goroutine go-libvirt keeps waiting on a call that libvirtx
// gave up on, which this reader cannot see: there is one more only per
// backoff.
func (p uidPace) backoff(timeouts int) time.Duration {
	d := p.retry
	for i := 1; i < timeouts && d < p.backoffMax; i++ {
		d *= 2
	}
	return min(d, p.backoffMax)
}

func newVMIUIDs(domains func() []api.Domain, read func(ctx context.Context, socket, domain, uuid string) (string, error)) *vmiUIDs {
	return &vmiUIDs{
		domains: domains,
		read:    read,
		pace:    defaultUIDPace,
		known:   map[uidKey]uidRead{},
		sockets: map[string]*uidSocket{},
		freed:   make(chan struct{}, 1),
	}
}

// get is the UID read of the domain, "" while unread or when it carries
// no KubeVirt metadata.
func (u *vmiUIDs) get(socket, domain, uuid string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.known[uidKey{socket, domain, uuid}].uid
}

func (u *vmiUIDs) run(ctx context.Context) {
	tick := time.NewTicker(u.pace.every)
	defer tick.Stop()
	defer u.held.Wait()
	for {
		u.refresh(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-u.freed:
		}
	}
}

// refresh starts reads of the KubeVirt-named domains not read yet, as many
// as free slots and their sockets allow, and forgets what is gone. It does
// not wait for them: a read that hangs must not hold back the next round.
func (u *vmiUIDs) refresh(ctx context.Context, now time.Time) {
	doms := u.domains() // the tracker's lock is not taken under ours
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, k := range u.due(doms, now) {
		if ctx.Err() != nil || u.reading >= u.pace.slots {
			return
		}
		if s := u.socket(k.socket); u.mayAsk(s, now) {
			u.start(ctx, k, s, now)
		}
	}
}

// due forgets the domains and sockets gone and returns the domains to read.
func (u *vmiUIDs) due(doms []api.Domain, now time.Time) []uidKey {
	present := map[uidKey]bool{}
	listed := map[string]bool{}
	var todo []uidKey
	for _, d := range doms {
		if d.Namespace == "" {
			continue
		}
		k := uidKey{d.Socket, d.Name, d.UUID}
		present[k], listed[d.Socket] = true, true
		if r := u.known[k]; !r.done && !now.Before(r.retry) {
			todo = append(todo, k)
		}
	}
	for k := range u.known {
		if !present[k] {
			delete(u.known, k)
		}
	}
	for path, s := range u.sockets {
		if !listed[path] && !s.busy && now.Sub(s.quiet) >= u.pace.backoffMax {
			delete(u.sockets, path)
		}
	}
	return todo
}

func (u *vmiUIDs) socket(path string) *uidSocket {
	s := u.sockets[path]
	if s == nil {
		s = &uidSocket{}
		u.sockets[path] = s
	}
	return s
}

func (u *vmiUIDs) mayAsk(s *uidSocket, now time.Time) bool {
	if s.busy || now.Before(s.quiet) {
		return false
	}
	return s.timeouts == 0 || u.readingSuspect < u.pace.suspects
}

// start reads k's UID in a goroutine of its own, which ends when read
// returns. The slot is given back when read returns or its context ends,
// whichever comes first: a read that outlasts its context is no longer
// waited on, but its socket stays busy until it returns.
func (u *vmiUIDs) start(ctx context.Context, k uidKey, s *uidSocket, now time.Time) {
	suspect := s.timeouts > 0
	s.busy = true
	u.take(suspect)
	rctx, cancel := context.WithTimeout(ctx, u.pace.limit)
	gaveUp := context.AfterFunc(rctx, func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.timedOut(s, rctx, now)
		u.give(suspect)
	})
	go func() {
		defer cancel()
		uid, err := u.read(rctx, k.socket, k.domain, k.uuid)
		u.mu.Lock()
		defer u.mu.Unlock()
		s.busy = false
		u.answered(k, uid, err, now)
		if gaveUp() {
			u.inTime(s, rctx, err, now)
			u.give(suspect)
		}
	}()
}

func (u *vmiUIDs) take(suspect bool) {
	u.held.Add(1)
	u.reading++
	if suspect {
		u.readingSuspect++
	}
}

func (u *vmiUIDs) give(suspect bool) {
	u.reading--
	if suspect {
		u.readingSuspect--
	}
	u.held.Done()
	select {
	case u.freed <- struct{}{}:
	default:
	}
}

// answered keeps what a read returned, even late: a UID is still the
// domain's, and a domain gone since is dropped at the next round.
func (u *vmiUIDs) answered(k uidKey, uid string, err error, now time.Time) {
	r := uidRead{uid: uid, done: err == nil}
	if err != nil {
		r.retry = now.Add(u.pace.retry)
	}
	u.known[k] = r
}

// inTime settles a read that returned before its slot was given up on.
// One that failed as its deadline passed timed out all the same; any other
// answer shows the socket's libvirt answers.
func (u *vmiUIDs) inTime(s *uidSocket, rctx context.Context, err error, now time.Time) {
	if err != nil && rctx.Err() != nil {
		u.timedOut(s, rctx, now)
		return
	}
	s.timeouts = 0
}

// timedOut rests s when its read ran out of time; the reader's own end is
// no fault of the socket's.
func (u *vmiUIDs) timedOut(s *uidSocket, rctx context.Context, now time.Time) {
	if !errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return
	}
	s.timeouts++
	s.quiet = now.Add(u.pace.backoff(s.timeouts))
}
