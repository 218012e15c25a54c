package migration

import "github.com/ferry-vm/ferry/api"

// TransferRate is the rate a finished migration moved memory at as QEMU
// measured it: the median of its passes' rates, or its last rate.
func TransferRate(j api.Job) float64 {
	var rates []float64
	for _, it := range j.Iterations {
		if it.TransferRateBytesPerSecond > 0 {
			rates = append(rates, float64(it.TransferRateBytesPerSecond))
		}
	}
	if len(rates) == 0 {
		return float64(j.TransferRateBytesPerSecond)
	}
	return Median(rates)
}
