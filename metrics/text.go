package metrics

import (
	"bufio"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/ferry-vm/ferry/api"
)

// writeJobs writes the per-job families in the text format, each family's
// series together as the format requires.
func (c *Collector) writeJobs(w *bufio.Writer, jobs []api.Job, log *zap.Logger) {
	bufs := make([][]byte, len(jobFamilies))
	var labels []byte
	for _, j := range jobs {
		vals := [...]string{c.node, j.Socket, j.Domain, string(j.Role), j.Namespace, j.Name}
		if !allUTF8(vals[:]) {
			// The registry drops such a series too; the rest are served.
			log.Warn("metrics: job left out: a label is not valid UTF-8", zap.String("domain", j.Domain), zap.String("socket", j.Socket))
			continue
		}
		labels = labels[:0]
		for i, v := range vals {
			labels = appendLabel(labels, i, JobLabels[i], v)
		}
		c.jobSeries(j, func(f *family, v float64, extra ...string) {
			if !allUTF8(extra) {
				log.Warn("metrics: series left out: a label is not valid UTF-8", zap.String("metric", f.Name), zap.String("domain", j.Domain))
				return
			}
			b := append(bufs[f.index], f.Name...)
			b = append(b, labels...)
			for i, e := range extra {
				b = appendLabel(b, 1, f.extra[i], e)
			}
			b = append(b, "} "...)
			b = appendValue(b, v)
			bufs[f.index] = append(b, '\n')
		})
	}
	for i, f := range jobFamilies {
		if len(bufs[i]) == 0 {
			continue
		}
		w.WriteString(f.header)
		w.Write(bufs[i])
	}
}

func allUTF8(vs []string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// appendLabel appends name="value", opening the braces for the first.
func appendLabel(b []byte, i int, name, value string) []byte {
	if i == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(b, name...)
	b = append(b, '=', '"')
	for k := 0; k < len(value); k++ {
		switch ch := value[k]; ch {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, ch)
		}
	}
	return append(b, '"')
}

// appendValue writes a sample value as the text format spells it.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }
