package drive

import "github.com/ferry-vm/ferry/migration"

// newRecord is the record ferryd hands the driver: a tracker that reads
// the driver's books, with trials of its own.
func newRecord(cfg migration.Config) (*migration.Tracker, Record) {
	books := NewBooks()
	cfg.Driver = books
	tr := migration.NewTracker(cfg)
	books.ShowOn(tr.Books())
	return tr, Record{Jobs: tr, Acts: tr.Acts(), Books: books, Trials: NewTrials()}
}

// recordOnly is newRecord's record alone.
func recordOnly(cfg migration.Config) Record {
	_, rec := newRecord(cfg)
	return rec
}
