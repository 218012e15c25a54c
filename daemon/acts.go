package daemon

import (
	"context"
	"time"

	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// onLibvirt makes a call on the job's own libvirt socket, on the pool's
// connection to it: how Ferry acts on a migration it does not drive
// (KubeVirt's). One it drives is acted on by its owner alone. An act is
// refused before anything is recorded when the pool has no connection;
// the call is made on the connection it was reached with.
func onLibvirt(conns drive.Conns, call func(ctx context.Context, c *libvirtx.Conn, on migration.Acting) error) migration.Act {
	var c *libvirtx.Conn
	return migration.Act{
		Reach: func(on migration.Acting) (err error) {
			c, err = conns.Conn(on.Socket)
			return err
		},
		Call: func(ctx context.Context, on migration.Acting) error { return call(ctx, c, on) },
	}
}

func abortJob(ctx context.Context, c *libvirtx.Conn, on migration.Acting) error {
	return c.AbortJob(ctx, on.Domain, on.PostCopy)
}

func startPostCopy(ctx context.Context, c *libvirtx.Conn, on migration.Acting) error {
	return c.StartPostCopy(ctx, on.Domain)
}

// libvirtActs carries the convergence policy's decisions out on a
// migration Ferry does not drive, the job the policy judged.
type libvirtActs struct {
	t     *migration.Tracker
	conns drive.Conns
	id    string
}

func (a libvirtActs) SetMaxDowntime(ctx context.Context, d time.Duration) error {
	return a.t.SetMaxDowntime(ctx, migration.JobRef{ID: a.id}, d, onLibvirt(a.conns, func(ctx context.Context, c *libvirtx.Conn, on migration.Acting) error {
		return c.SetMaxDowntime(ctx, on.Domain, d)
	}))
}

func (a libvirtActs) StartPostCopy(ctx context.Context) error {
	_, err := a.t.StartPostCopy(ctx, migration.JobRef{ID: a.id}, "by the convergence policy", onLibvirt(a.conns, startPostCopy))
	return err
}

func (a libvirtActs) Abort(ctx context.Context, why string) error {
	_, err := a.t.Abort(ctx, migration.JobRef{ID: a.id}, false, migration.AbortByPolicy, why, onLibvirt(a.conns, abortJob))
	return err
}
