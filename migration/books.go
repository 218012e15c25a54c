package migration

// Books is where the tracker is told of the driver's account (package
// drive keeps it, and the tracker reads it through Driver): that a
// migration it drives began or ended, and what befalls it as it happens
// (in doubt, paused for recovery, resumed, given up). It shows them on the
// jobs it observes; nothing but the driver tells it, and the tracker's own
// methods are what it observes.
type Books struct{ t *Tracker }

// Books is where the driver's account is shown.
func (t *Tracker) Books() Books { return Books{t} }
