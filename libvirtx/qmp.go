package libvirtx

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/ferry-vm/ferry/internal/peercred"
)

// A post-copy migration whose stream breaks pauses in QEMU on both nodes
// and can be resumed over a new connection (migrate-recover on the target,
// migrate with resume on the source). libvirt 11.3 cannot drive that
// itself (its resume crashes the target daemon), and while the target's
// failed incoming job lives, libvirt answers no call on the domain there.
// So the target's QEMU gets a QMP monitor of Ferry's own, and the source's
// QEMU is reached through libvirt's monitor pass-through, which its
// outgoing job allows.

// MigrationStatus is QEMU's own word on a migration (query-migrate): its
// state, and what it has sent so far.
type MigrationStatus struct {
	Status string `json:"status"`
	RAM    struct {
		Transferred uint64 `json:"transferred"`
	} `json:"ram"`
}

// QEMU's migration states Ferry acts on.
const (
	QEMUMigrationNone               = "none"
	QEMUMigrationPostCopyActive     = "postcopy-active"
	QEMUMigrationPostCopyPaused     = "postcopy-paused"
	QEMUMigrationPostCopyRecoverSet = "postcopy-recover-setup"
	QEMUMigrationPostCopyRecover    = "postcopy-recover"
	QEMUMigrationCompleted          = "completed"
	QEMUMigrationFailed             = "failed"
)

// qmpCommand is one QMP request.
type qmpCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

// qmpReply is a QMP answer or event: exactly one of Return, Error and
// Event is set.
type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// QMPError is a command QEMU refused, with its own words.
type QMPError struct {
	Command, Class, Desc string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("QEMU refused %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// maxQMPLine bounds one line QEMU sends (query-migrate's is under 2 KiB).
const maxQMPLine = 1 << 20

// QMP is a session on a QEMU monitor socket Ferry owns.
type QMP struct {
	c  net.Conn
	rd *bufio.Reader
}

// DialQMP connects to the QMP socket of the QEMU with process ID pid (in
// ferryd's PID namespace), refusing any other process listening there, and
// leaves capabilities negotiation done, all within ctx.
func DialQMP(ctx context.Context, path string, pid int) (*QMP, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("QEMU's monitor: %w", err)
	}
	if err := peerIs(c, pid); err != nil {
		c.Close()
		return nil, fmt.Errorf("QEMU's monitor: %w", err)
	}
	q := &QMP{c: c, rd: bufio.NewReaderSize(c, 4096)}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := q.line()
	if err == nil {
		err = json.Unmarshal(line, &greeting)
	}
	if err == nil && greeting.QMP == nil {
		err = errors.New("no QMP greeting")
	}
	if err == nil {
		_, err = q.run(ctx, qmpCommand{Execute: "qmp_capabilities"})
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("QEMU's monitor: %w", err)
	}
	return q, nil
}

func (q *QMP) Close() error { return q.c.Close() }

// peerIs checks that the process at the other end of c is pid.
func peerIs(c net.Conn, pid int) error {
	cred, err := peercred.Of(c)
	if err != nil {
		return err
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("its listener is pid %d, not the guest's QEMU (pid %d)", cred.Pid, pid)
	}
	return nil
}

func (q *QMP) line() ([]byte, error) {
	var out []byte
	for {
		chunk, more, err := q.rd.ReadLine()
		if err != nil {
			return nil, err
		}
		if len(out)+len(chunk) > maxQMPLine {
			return nil, errors.New("QEMU's monitor sent an overlong line")
		}
		out = append(out, chunk...)
		if !more {
			return out, nil
		}
	}
}

// run sends one command and returns its answer, skipping the events QEMU
// sends meanwhile.
func (q *QMP) run(ctx context.Context, cmd qmpCommand) (json.RawMessage, error) {
	if dl, ok := ctx.Deadline(); ok {
		q.c.SetDeadline(dl)
	} else {
		q.c.SetDeadline(time.Time{})
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := q.line()
		if err != nil {
			return nil, err
		}
		var r qmpReply
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("QEMU's monitor answered %s with no JSON: %w", cmd.Execute, err)
		}
		switch {
		case r.Event != "":
			continue
		case r.Error != nil:
			return nil, &QMPError{Command: cmd.Execute, Class: r.Error.Class, Desc: r.Error.Desc}
		case r.Return != nil:
			return r.Return, nil
		}
		return nil, fmt.Errorf("QEMU's monitor answered %s with neither a return nor an error", cmd.Execute)
	}
}

// MigrationStatus asks QEMU for its migration's state.
func (q *QMP) MigrationStatus(ctx context.Context) (string, error) {
	raw, err := q.run(ctx, qmpCommand{Execute: "query-migrate"})
	if err != nil {
		return "", err
	}
	st, err := migrationStatus(raw)
	return st.Status, err
}

// MigrateRecover has a paused incoming post-copy migration listen on a
// unix socket for the source to resume it.
func (q *QMP) MigrateRecover(ctx context.Context, socket string) error {
	_, err := q.run(ctx, qmpCommand{Execute: "migrate-recover", Arguments: map[string]string{"uri": "unix:" + socket}})
	return err
}

// MigratePause cuts a post-copy migration's stream so that QEMU pauses it
// (it would otherwise wait on a silent link).
func (q *QMP) MigratePause(ctx context.Context) error {
	_, err := q.run(ctx, qmpCommand{Execute: "migrate-pause"})
	return err
}

func migrationStatus(raw json.RawMessage) (MigrationStatus, error) {
	var st MigrationStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("query-migrate: %w", err)
	}
	if st.Status == "" {
		// QEMU leaves it out before any migration.
		st.Status = QEMUMigrationNone
	}
	return st, nil
}

// monitorCommand runs a QMP command on a domain through libvirt's
// monitor pass-through (libvirt taints the domain "custom-monitor").
func (c *Conn) monitorCommand(ctx context.Context, dom libvirt.Domain, cmd qmpCommand) (json.RawMessage, error) {
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	out, err := call(ctx, c, "QEMU monitor "+cmd.Execute, func(l *libvirt.Libvirt) (string, error) {
		return l.QEMUDomainMonitorCommand(dom, string(b), 0)
	})
	if err != nil {
		return nil, err
	}
	var r qmpReply
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("QEMU's answer to %s through libvirt: %w", cmd.Execute, err)
	}
	if r.Error != nil {
		return nil, &QMPError{Command: cmd.Execute, Class: r.Error.Class, Desc: r.Error.Desc}
	}
	return r.Return, nil
}

// QEMUMigrationStatus asks the domain's QEMU, through libvirt, for its
// migration's state.
func (c *Conn) QEMUMigrationStatus(ctx context.Context, dom libvirt.Domain) (string, error) {
	st, err := c.QEMUMigrationInfo(ctx, dom)
	return st.Status, err
}

// QEMUMigrationInfo is QEMUMigrationStatus with what QEMU has sent.
func (c *Conn) QEMUMigrationInfo(ctx context.Context, dom libvirt.Domain) (MigrationStatus, error) {
	raw, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "query-migrate"})
	if err != nil {
		return MigrationStatus{}, err
	}
	return migrationStatus(raw)
}

// PauseMigration cuts the domain's post-copy stream so that QEMU pauses
// the migration, as it does when the stream breaks.
func (c *Conn) PauseMigration(ctx context.Context, dom libvirt.Domain) error {
	_, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "migrate-pause"})
	return err
}

// ResumeMigration has a paused outgoing post-copy migration go on over a
// unix socket (with the post-copy bandwidth cap it had).
func (c *Conn) ResumeMigration(ctx context.Context, dom libvirt.Domain, socket string) error {
	_, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "migrate",
		Arguments: map[string]any{"uri": "unix:" + socket, "resume": true}})
	return err
}

// ContinueCPUs starts a paused domain's vCPUs through QEMU's own monitor.
// libvirt's resume takes a job an outgoing migration's job shuts out,
// even one QEMU has ended; the monitor's pass-through is let in.
func (c *Conn) ContinueCPUs(ctx context.Context, dom libvirt.Domain) error {
	_, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "cont"})
	return err
}
