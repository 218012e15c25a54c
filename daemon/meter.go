package daemon

import "context"

// dirtyRate is a domain's measured dirty rate, if it has been measured.
func (d *Daemon) dirtyRate(socket, domain string) (uint64, bool) {
	if d.meter == nil {
		return 0, false
	}
	return d.meter.Rate(socket, domain)
}

// quiet holds the dirty-rate measurements off a domain about to migrate.
func (d *Daemon) quiet(ctx context.Context, socket, domain string) func() {
	if d.meter == nil {
		return func() {}
	}
	return d.meter.Quiet(ctx, socket, domain)
}
