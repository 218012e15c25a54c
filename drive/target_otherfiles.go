package drive

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/peer"
)

// takesNoOtherGuestsFiles refuses an incoming domain (its live XML and
// its definition, both checked already) that names a file another domain
// of this node uses, running or defined: a peer would have QEMU read
// another guest's disk, or write into it (a chardev, an NVRAM, a
// writable loader) at Prepare, a dry run's too. The allowlist says which
// directories; this says whose file.
//
// It returns the guest's UUID and files, live and definition together,
// for the next prepare's check (noteComingFiles).
func (in *Target) takesNoOtherGuestsFiles(ctx context.Context, c *libvirtx.Conn, live, config string) (string, libvirtx.GuestFiles, error) {
	var all libvirtx.GuestFiles
	uuid, err := libvirtx.DomainUUID(live)
	if err != nil {
		return "", all, &peer.Refusal{Reason: "invalid_domain_xml", Msg: err.Error()}
	}
	others, err := c.OtherGuestsFiles(ctx, uuid, in.comingFiles)
	if err != nil {
		// The peer hears no other guest's name; this node's log does.
		if in.log != nil {
			in.log.Warn("an incoming guest's check of this node's guests' files failed", zap.Error(err))
		}
		return "", all, PeerError(fmt.Errorf("listing this node's guests' files: %w", err))
	}
	in.unlistedComing(others, uuid)
	if all, err = guestFilesOf(live, config); err != nil {
		return "", all, &peer.Refusal{Reason: "invalid_domain_xml", Msg: err.Error()}
	}
	if o, taken := libvirtx.TakenFrom(all, others); taken {
		return "", all, &peer.Refusal{Reason: "invalid_domain_xml", Msg: fmt.Sprintf("domain XML refused: %q is a file of domain %s on this node: a migrated guest brings only files of its own", o.File, o.Name)}
	}
	return uuid, all, nil
}

// guestFilesOf are the files of an incoming guest's live XML and its
// definition (config, if any) together.
func guestFilesOf(live, config string) (libvirtx.GuestFiles, error) {
	var all libvirtx.GuestFiles
	for _, x := range []string{live, config} {
		if x == "" {
			continue
		}
		f, err := libvirtx.FilesOf(x)
		if err != nil {
			return all, err
		}
		all.Add(f)
	}
	return all, nil
}
