package main

import "strconv"

// summary is what the counts come to: each count's cost per launcher and
// ratio to the baseline (the smallest count, 0 by default) of the same
// run, a line per figure through all counts, and the goals at the largest
// count and on the lines. Printed and written to --json alike.
type summary struct {
	BaselineLaunchers int             `json:"baselineLaunchers"`
	PerLauncher       []perLauncher   `json:"perLauncher"`
	Lines             map[string]line `json:"lines"`
	Goals             []goalResult    `json:"goals"`
}

// perLauncher is one count against the baseline; a figure is absent where
// it cannot be had (no value, or a ratio to a baseline of 0).
type perLauncher struct {
	Launchers int `json:"launchers"`
	// Cost is (value - baseline) / (launchers - baseline launchers), of
	// the additive figures.
	Cost  map[string]float64 `json:"costPerLauncher"`
	Ratio map[string]float64 `json:"xBaseline"`
}

type goalResult struct {
	Goal        string  `json:"goal"`
	Limit       float64 `json:"limit"`
	AtLaunchers int     `json:"atLaunchers"`
	// Value is at the largest count measured, nil if not measured there.
	Value *float64 `json:"value"`
	Met   *bool    `json:"met"`
	// OnLine is the fitted line's value at each of extrapolateTo, and
	// MetOnLine whether it meets the goal there.
	OnLine    map[string]float64 `json:"onLine,omitempty"`
	MetOnLine map[string]bool    `json:"metOnLine,omitempty"`
}

func summarize(rs []countResult) summary {
	s := summary{Lines: map[string]line{}}
	if len(rs) == 0 {
		return s
	}
	base := rs[0]
	s.BaselineLaunchers = base.Launchers
	for _, r := range rs[1:] {
		pl := perLauncher{Launchers: r.Launchers, Cost: map[string]float64{}, Ratio: map[string]float64{}}
		for _, f := range figures {
			v, ok := f.value(r)
			v0, ok0 := f.value(base)
			if !ok || !ok0 {
				continue
			}
			if f.Additive {
				pl.Cost[f.Key] = (v - v0) / float64(r.Launchers-base.Launchers)
			}
			if v0 != 0 {
				pl.Ratio[f.Key] = v / v0
			}
		}
		s.PerLauncher = append(s.PerLauncher, pl)
	}
	for _, f := range figures {
		var xs, ys []float64
		for _, r := range rs {
			if v, ok := f.value(r); ok {
				xs, ys = append(xs, float64(r.Launchers)), append(ys, v)
			}
		}
		if l, err := fitLine(xs, ys); err == nil {
			s.Lines[f.Key] = l
		}
	}
	last := rs[len(rs)-1]
	for _, g := range goals {
		gr := goalResult{Goal: g.Text, Limit: g.Limit, AtLaunchers: last.Launchers}
		if v, ok := figureByKey(g.Key).value(last); ok && (!g.PerLauncher || last.Launchers > 0) {
			if g.PerLauncher {
				v /= float64(last.Launchers)
			}
			met := g.met(v)
			gr.Value, gr.Met = &v, &met
		}
		if l, ok := s.Lines[g.Key]; ok {
			gr.OnLine, gr.MetOnLine = map[string]float64{}, map[string]bool{}
			for _, n := range extrapolateTo {
				v := l.at(float64(n))
				if g.PerLauncher {
					v /= float64(n)
				}
				gr.OnLine[strconv.Itoa(n)], gr.MetOnLine[strconv.Itoa(n)] = v, g.met(v)
			}
		}
		s.Goals = append(s.Goals, gr)
	}
	return s
}
