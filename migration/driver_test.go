package migration

import (
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/api"
)

// fakeDriver stands for the driver's books (drive.Books, which this
// package may not import): the account a test gives, read by the tracker
// and shown on it as the driver shows it.
type fakeDriver struct {
	tr        *Tracker
	mu        sync.Mutex
	last      uint64
	driving   map[jobKey]Driving
	preparing map[jobKey]Preparing
}

// driverOf is the fake driver tr reads, made on first use.
func driverOf(tr *Tracker) *fakeDriver {
	if d, ok := tr.cfg.Driver.(*fakeDriver); ok {
		return d
	}
	d := &fakeDriver{tr: tr, driving: map[jobKey]Driving{}, preparing: map[jobKey]Preparing{}}
	tr.cfg.Driver = d
	return d
}

func (d *fakeDriver) Driving(socket, domain string) (Driving, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.driving[jobKey{socket, domain}]
	return a, ok
}

func (d *fakeDriver) Preparing(socket, domain string) (Preparing, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.preparing[jobKey{socket, domain}]
	return p, ok
}

func (d *fakeDriver) Shown(socket, domain string, number uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.driving[jobKey{socket, domain}]
	switch {
	case !ok || a.Number != number:
	case a.Ended:
		delete(d.driving, jobKey{socket, domain})
	default:
		a.Shown = true
		d.driving[jobKey{socket, domain}] = a
	}
}

func (d *fakeDriver) IncomingEnded(socket, domain, id string) { d.ForgetIncoming(socket, domain, id) }

func (d *fakeDriver) Drive(socket, domain string, info api.ProxyInfo) {
	d.mu.Lock()
	d.last++
	d.driving[jobKey{socket, domain}] = Driving{Number: d.last, Proxy: &info}
	d.mu.Unlock()
	d.tr.Books().DriveBegan(socket, domain)
}

func (d *fakeDriver) DriveRecoverable(socket, domain string, recoverFor time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.driving[jobKey{socket, domain}]; ok {
		a.RecoverFor = recoverFor
		d.driving[jobKey{socket, domain}] = a
	}
}

func (d *fakeDriver) DriveEnded(domain string, ref libvirt.Domain, socket string, start time.Time, info api.ProxyInfo, failure string) {
	d.end(socket, domain, start, info, failure, failure == "", false)
	d.tr.Books().DriveEnded(domain, ref, socket)
}

func (d *fakeDriver) DriveSettled(socket, domain, uuid string, start time.Time, info api.ProxyInfo, phase api.Phase, reason string) {
	d.end(socket, domain, start, info, reason, phase == api.PhaseCompleted, true)
	d.tr.Books().DriveSettled(socket, domain, uuid, phase)
}

func (d *fakeDriver) end(socket, domain string, start time.Time, info api.ProxyInfo, failure string, completed, settled bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.driving[jobKey{socket, domain}]
	if !ok || a.Ended {
		d.last++
		a = Driving{Number: d.last}
	}
	a.Begun, a.Proxy, a.Failure, a.Ended, a.Completed, a.Settled = start, &info, failure, true, completed, settled
	d.driving[jobKey{socket, domain}] = a
}

func (d *fakeDriver) ExpectIncoming(socket, domain, id, peerNode string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.preparing[jobKey{socket, domain}] = Preparing{ID: id, PeerNode: peerNode}
}

func (d *fakeDriver) IncomingRecoverable(socket, domain, id string, recoverFor time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.preparing[jobKey{socket, domain}]; ok && p.ID == id {
		p.RecoverFor = recoverFor
		d.preparing[jobKey{socket, domain}] = p
	}
}

func (d *fakeDriver) ForgetIncoming(socket, domain, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.preparing[jobKey{socket, domain}].ID == id {
		delete(d.preparing, jobKey{socket, domain})
	}
}
