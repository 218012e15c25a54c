package migration

// Books is where the driver (package drive) keeps its account of the
// migrations it drives and prepares: each one it drives and how it ended
// (settled, in doubt, lost, paused for recovery, given up), and the
// incoming migrations it prepares for a peer (drive.Account).
// The tracker shows them on the jobs it observes; nothing but the driver
// writes them, and the tracker's own methods are what it observes.
type Books struct{ t *Tracker }

// Books is the driver's way into its books.
func (t *Tracker) Books() Books { return Books{t} }
