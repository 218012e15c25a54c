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
)

// A post-copy migration whose stream breaks pauses in QEMU on both nodes
// and can be resumed over a new connection (migrate-recover on the target,
// migrate with resume on the source). libvirt 11.3 cannot drive that
// itself (its resume crashes the target daemon), and while the target's
// failed incoming job lives, libvirt answers no call on the domain there.
// So the target's QEMU gets a QMP monitor of Ferry's own, and the source's
// QEMU is reached through libvirt's monitor pass-through, which its
// outgoing job allows.

// MigrationStatus is QEMU's own word on a migration (query-migrate).
type MigrationStatus struct {
	Status string `json:"status"`
}

// QEMU's migration states Ferry acts on.
const (
	QEMUMigrationNone               = "none"
	QEMUMigrationActive             = "active"
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

// DialQMP connects to a QMP socket and leaves capabilities negotiation
// done, all within ctx.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
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
	return migrationStatus(raw)
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

func migrationStatus(raw json.RawMessage) (string, error) {
	var st MigrationStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("query-migrate: %w", err)
	}
	if st.Status == "" {
		// QEMU leaves it out before any migration.
		st.Status = QEMUMigrationNone
	}
	return st.Status, nil
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
	raw, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "query-migrate"})
	if err != nil {
		return "", err
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
// unix socket, at bandwidth bytes/s in post-copy (0 leaves QEMU's cap).
func (c *Conn) ResumeMigration(ctx context.Context, dom libvirt.Domain, socket string, bandwidth uint64) error {
	if bandwidth > 0 {
		if _, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "migrate-set-parameters",
			Arguments: map[string]uint64{"max-postcopy-bandwidth": bandwidth}}); err != nil {
			return err
		}
	}
	_, err := c.monitorCommand(ctx, dom, qmpCommand{Execute: "migrate",
		Arguments: map[string]any{"uri": "unix:" + socket, "resume": true}})
	return err
}
