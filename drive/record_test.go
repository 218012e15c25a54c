package drive

import "github.com/ferry-vm/ferry/migration"

// recordOf is the record ferryd hands the driver: a tracker's, with
// trials of its own.
func recordOf(tr *migration.Tracker) Record {
	return Record{Jobs: tr, Account: tr.Books(), Acts: tr.Acts(), Trials: NewTrials()}
}
