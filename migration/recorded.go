package migration

import (
	"encoding/json"
	"os"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/libvirtx"
)

// RecordedJob is a job's readings as `ferryctl -o json job` prints them,
// kept to replay a real migration into a tracker.
type RecordedJob struct {
	Domain           string       `json:"domain"`
	DataTotalBytes   uint64       `json:"dataTotalBytes"`
	MemoryTotalBytes uint64       `json:"memoryTotalBytes"`
	Samples          []api.Sample `json:"samples"`
}

// LoadRecordedJob reads a RecordedJob from a JSON file.
func LoadRecordedJob(path string) (RecordedJob, error) {
	var r RecordedJob
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// Stats is the libvirt reading a sample was taken from, as far as the
// sample keeps it.
func (r RecordedJob) Stats(s api.Sample) libvirtx.JobStats {
	return libvirtx.JobStats{Type: libvirtx.JobUnbounded, Operation: libvirtx.OperationMigrationOut,
		TimeElapsedMs: s.ElapsedMs, MemoryIteration: s.Iteration, DataTotal: r.DataTotalBytes, MemoryTotal: r.MemoryTotalBytes,
		DataProcessed: s.DataProcessedBytes, DataRemaining: s.DataRemainingBytes, MemoryRemaining: s.MemoryRemainingBytes,
		MemoryBps: s.TransferRateBytesPerSecond, MemoryDirtyRate: s.DirtyRateBytesPerSecond, MemoryPostCopyReqs: s.PostCopyRequests}
}
