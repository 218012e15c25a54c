package libvirtx

import (
	"context"
	"errors"

	libvirt "github.com/digitalocean/go-libvirt"
)

// JobType is libvirt's virDomainJobType.
type JobType int32

const (
	JobNone      JobType = 0
	JobBounded   JobType = 1
	JobUnbounded JobType = 2
	JobCompleted JobType = 3
	JobFailed    JobType = 4
	JobCancelled JobType = 5
)

func (t JobType) String() string {
	switch t {
	case JobNone:
		return "none"
	case JobBounded:
		return "bounded"
	case JobUnbounded:
		return "unbounded"
	case JobCompleted:
		return "completed"
	case JobFailed:
		return "failed"
	case JobCancelled:
		return "cancelled"
	}
	return "unknown"
}

// Active reports whether the job is still running.
func (t JobType) Active() bool { return t == JobBounded || t == JobUnbounded }

// Job operations (virDomainJobOperation) that matter for migrations.
const (
	OperationMigrationIn  int32 = 4
	OperationMigrationOut int32 = 5
)

// JobStats is virDomainGetJobStats decoded. Sizes are bytes and rates bytes
// per second: libvirt reports the dirty rate in pages, converted here with
// the page size it reports alongside, so no caller ever multiplies by 4096.
type JobStats struct {
	Type      JobType `json:"type"`
	Operation int32   `json:"operation,omitempty"`

	TimeElapsedMs    uint64 `json:"timeElapsedMs"`
	TimeElapsedNetMs uint64 `json:"timeElapsedNetMs,omitempty"`
	TimeRemainingMs  uint64 `json:"timeRemainingMs,omitempty"`
	DowntimeMs       uint64 `json:"downtimeMs,omitempty"`
	DowntimeNetMs    uint64 `json:"downtimeNetMs,omitempty"`
	SetupTimeMs      uint64 `json:"setupTimeMs,omitempty"`

	DataTotal     uint64 `json:"dataTotalBytes"`
	DataProcessed uint64 `json:"dataProcessedBytes"`
	DataRemaining uint64 `json:"dataRemainingBytes"`

	MemoryTotal        uint64 `json:"memoryTotalBytes"`
	MemoryProcessed    uint64 `json:"memoryProcessedBytes"`
	MemoryRemaining    uint64 `json:"memoryRemainingBytes"`
	MemoryConstant     uint64 `json:"memoryConstantPages,omitempty"`
	MemoryNormal       uint64 `json:"memoryNormalPages,omitempty"`
	MemoryNormalBytes  uint64 `json:"memoryNormalBytes,omitempty"`
	MemoryBps          uint64 `json:"memoryBytesPerSecond"`
	MemoryDirtyRate    uint64 `json:"memoryDirtyRateBytesPerSecond"`
	MemoryPageSize     uint64 `json:"memoryPageSize,omitempty"`
	MemoryIteration    uint64 `json:"memoryIteration"`
	MemoryPostCopyReqs uint64 `json:"memoryPostcopyRequests"`

	DiskTotal     uint64 `json:"diskTotalBytes,omitempty"`
	DiskProcessed uint64 `json:"diskProcessedBytes,omitempty"`
	DiskRemaining uint64 `json:"diskRemainingBytes,omitempty"`
	DiskBps       uint64 `json:"diskBytesPerSecond,omitempty"`

	CompressionCache       uint64 `json:"compressionCacheBytes,omitempty"`
	CompressionBytes       uint64 `json:"compressionBytes,omitempty"`
	CompressionPages       uint64 `json:"compressionPages,omitempty"`
	CompressionCacheMisses uint64 `json:"compressionCacheMisses,omitempty"`
	CompressionOverflow    uint64 `json:"compressionOverflow,omitempty"`

	AutoConvergeThrottle uint64 `json:"autoConvergeThrottlePercent,omitempty"`
	Success              bool   `json:"success,omitempty"`
	ErrMsg               string `json:"errmsg,omitempty"`
}

// DecodeJobStats turns libvirt's typed parameters into JobStats. Unknown
// fields are ignored so newer libvirt versions keep working.
func DecodeJobStats(typ int32, params []libvirt.TypedParam) JobStats {
	s := JobStats{Type: JobType(typ)}
	var dirtyPages uint64
	for _, p := range params {
		u, _ := paramUint(p.Value.I)
		switch p.Field {
		case "operation":
			s.Operation = int32(u)
		case "time_elapsed":
			s.TimeElapsedMs = u
		case "time_elapsed_net":
			s.TimeElapsedNetMs = u
		case "time_remaining":
			s.TimeRemainingMs = u
		case "downtime":
			s.DowntimeMs = u
		case "downtime_net":
			s.DowntimeNetMs = u
		case "setup_time":
			s.SetupTimeMs = u
		case "data_total":
			s.DataTotal = u
		case "data_processed":
			s.DataProcessed = u
		case "data_remaining":
			s.DataRemaining = u
		case "memory_total":
			s.MemoryTotal = u
		case "memory_processed":
			s.MemoryProcessed = u
		case "memory_remaining":
			s.MemoryRemaining = u
		case "memory_constant":
			s.MemoryConstant = u
		case "memory_normal":
			s.MemoryNormal = u
		case "memory_normal_bytes":
			s.MemoryNormalBytes = u
		case "memory_bps":
			s.MemoryBps = u
		case "memory_dirty_rate":
			dirtyPages = u
		case "memory_page_size":
			s.MemoryPageSize = u
		case "memory_iteration":
			s.MemoryIteration = u
		case "memory_postcopy_requests":
			s.MemoryPostCopyReqs = u
		case "disk_total":
			s.DiskTotal = u
		case "disk_processed":
			s.DiskProcessed = u
		case "disk_remaining":
			s.DiskRemaining = u
		case "disk_bps":
			s.DiskBps = u
		case "compression_cache":
			s.CompressionCache = u
		case "compression_bytes":
			s.CompressionBytes = u
		case "compression_pages":
			s.CompressionPages = u
		case "compression_cache_misses":
			s.CompressionCacheMisses = u
		case "compression_overflow":
			s.CompressionOverflow = u
		case "auto_converge_throttle":
			s.AutoConvergeThrottle = u
		case "success":
			s.Success = u != 0
		case "errmsg":
			s.ErrMsg, _ = p.Value.I.(string)
		}
	}
	page := s.MemoryPageSize
	if page == 0 {
		// libvirt omits the page size when QEMU does not report it; QEMU's
		// dirty-rate unit is then the target page size, 4 KiB on x86.
		page = 4096
	}
	s.MemoryDirtyRate = dirtyPages * page
	return s
}

func paramUint(v any) (uint64, bool) {
	switch n := v.(type) {
	case uint64:
		return n, true
	case int64:
		if n < 0 {
			return 0, true
		}
		return uint64(n), true
	case uint32:
		return uint64(n), true
	case int32:
		if n < 0 {
			return 0, true
		}
		return uint64(n), true
	case float64:
		return uint64(n), true
	case bool:
		if n {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// JobStats fetches the active job's statistics, or with completed=true the
// statistics libvirt kept of the last finished job. Those are read without
// removing them: libvirt deletes completed statistics on read unless asked
// to keep them, and then neither a later Ferry read (after a reconnect or a
// restart) nor an operator's "virsh domjobinfo --completed" would find them.
func (c *Conn) JobStats(ctx context.Context, dom libvirt.Domain, completed bool) (JobStats, error) {
	var flags libvirt.DomainGetJobStatsFlags
	if completed {
		flags = libvirt.DomainJobStatsCompleted | libvirt.DomainJobStatsKeepCompleted
	}
	return call(ctx, c, opJobStats, func(l *libvirt.Libvirt) (JobStats, error) {
		typ, params, err := l.DomainGetJobStats(dom, flags)
		if err != nil {
			return JobStats{}, err
		}
		return DecodeJobStats(typ, params), nil
	})
}

const opJobStats = "job stats"

// IsTargetOnly reports libvirt's refusal to give job statistics on the
// destination of a migration: the job exists but is the incoming side.
// libvirt's QEMU driver refuses with VIR_ERR_OPERATION_UNSUPPORTED; its
// message is translated under other locales, so the code is what is
// matched. go-libvirt does not pass on the error's domain, and the code is
// a general one, so an error that names its call must name JobStats.
func IsTargetOnly(err error) bool {
	var le libvirt.Error
	if !errors.As(err, &le) || le.Code != uint32(libvirt.ErrOperationUnsupported) {
		return false
	}
	var ce *CallError
	return !errors.As(err, &ce) || ce.Op == opJobStats
}
