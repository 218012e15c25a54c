package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/ferry-vm/ferry/api"
)

// vmiUIDs holds the VMI UID in each KubeVirt domain's metadata, read once
// per domain in the background: ferry_domain_active carries it so that a
// VMI the API server expects can be matched to its domain on any node,
// and a scrape never calls libvirt.
type vmiUIDs struct {
	domains func() []api.Domain
	read    func(ctx context.Context, socket, domain, uuid string) (string, error)

	mu    sync.Mutex
	known map[uidKey]uidRead
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

const (
	uidEvery      = 2 * time.Second
	uidRetryAfter = 30 * time.Second
	uidReadLimit  = 2 * time.Second
)

func newVMIUIDs(domains func() []api.Domain, read func(ctx context.Context, socket, domain, uuid string) (string, error)) *vmiUIDs {
	return &vmiUIDs{domains: domains, read: read, known: map[uidKey]uidRead{}}
}

// get is the UID read of the domain, "" while unread or when it carries
// no KubeVirt metadata.
func (u *vmiUIDs) get(socket, domain, uuid string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.known[uidKey{socket, domain, uuid}].uid
}

func (u *vmiUIDs) run(ctx context.Context) {
	tick := time.NewTicker(uidEvery)
	defer tick.Stop()
	for {
		u.refresh(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refresh reads the UIDs of the KubeVirt-named domains not read yet and
// forgets the domains gone. One at a time: a launcher's libvirt answers
// it at once, and one that hangs delays only this, by uidReadLimit.
func (u *vmiUIDs) refresh(ctx context.Context, now time.Time) {
	present := map[uidKey]bool{}
	var todo []uidKey
	u.mu.Lock()
	for _, d := range u.domains() {
		if d.Namespace == "" {
			continue
		}
		k := uidKey{d.Socket, d.Name, d.UUID}
		present[k] = true
		if r := u.known[k]; !r.done && !now.Before(r.retry) {
			todo = append(todo, k)
		}
	}
	for k := range u.known {
		if !present[k] {
			delete(u.known, k)
		}
	}
	u.mu.Unlock()
	for _, k := range todo {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, uidReadLimit)
		uid, err := u.read(rctx, k.socket, k.domain, k.uuid)
		cancel()
		r := uidRead{uid: uid, done: err == nil}
		if err != nil {
			r.retry = now.Add(uidRetryAfter)
		}
		u.mu.Lock()
		u.known[k] = r
		u.mu.Unlock()
	}
}
