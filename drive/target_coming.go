package drive

import (
	"context"
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/libvirtx"
)

// A guest coming here in a migration has its files checked by the next
// incoming guest's prepare (takesNoOtherGuestsFiles), but libvirt 11.3
// answers no call for its XML, live or inactive, until its migration is
// over: the check waited past its call timeout and refused every
// migration prepared beside it. So the files of a guest this node admitted
// are kept from the XML it was checked and prepared with, and stand for
// libvirt's answer only for that very domain (its name, its UUID and,
// once its Prepare returned, the domain ID that Prepare started) while
// libvirt shows it still coming, or running while this node's Finish of
// it runs (which starts the vCPUs first). A guest admitted whose Prepare has not
// made it a domain yet counts too. The check and the noting are one step
// (checkAndAdmit): two prepares never both pass on one file. A guest
// coming into a definition this node holds (adopted, or kept for its
// return) is asked of libvirt all the same: that definition is
// libvirt's to name.

// noteComingFiles keeps migration id's files (of the XML it was checked
// and prepared with) and UUID for as long as it is admitted.
func (in *Target) noteComingFiles(id, uuid string, files libvirtx.GuestFiles) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if g, ok := in.admitted[id]; ok {
		g.uuid, g.files = uuid, files
		in.admitted[id] = g
	}
}

// comingFiles are domain d's files if it is the guest of exactly one
// migration this node admitted: the same name and UUID, and the domain
// its Prepare started once that returned. Two prepares of one guest
// leave it to libvirt to say.
func (in *Target) comingFiles(d libvirt.Domain) (libvirtx.ComingGuest, bool) {
	uuid := libvirtx.UUIDString(d.UUID)
	in.mu.Lock()
	defer in.mu.Unlock()
	var coming libvirtx.ComingGuest
	n := 0
	for _, g := range in.admitted {
		if g.uuid == uuid && g.domain == d.Name && (g.domID == 0 || g.domID == d.ID) {
			coming, n = libvirtx.ComingGuest{Files: g.files, Finishing: g.heldByFinish()}, n+1
		}
	}
	return coming, n == 1
}

// unlistedComing adds to others the guests admitted here that libvirt
// does not list (their Prepare has not made them domains yet), but the
// guest of uuid.
func (in *Target) unlistedComing(others map[string]libvirtx.GuestFiles, uuid string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for id, g := range in.admitted {
		if _, listed := others[g.domain]; listed || g.uuid == "" || g.uuid == uuid {
			continue
		}
		others[fmt.Sprintf("%s (coming here, migration %s)", g.domain, id)] = g.files
	}
}

// startedID is the ID of the domain of name a Prepare started (0 if it
// cannot be read): an ID no later domain of this libvirtd takes.
func startedID(ctx context.Context, c *libvirtx.Conn, name, uuid string) int32 {
	dom, err := c.LookupDomain(ctx, name)
	if err != nil || libvirtx.UUIDString(dom.UUID) != uuid {
		return 0
	}
	return dom.ID
}
