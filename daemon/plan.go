package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/evacuate"
	"github.com/ferry-vm/ferry/metrics"
)

// getPlan answers GET /v1/plan?to=NODE,NODE&parallel=N&bandwidthMiBs=N.
func (d *Daemon) getPlan(w http.ResponseWriter, r *http.Request) {
	req, err := planRequestOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	p, err := d.plans.Plan(ctx, req)
	if err != nil {
		writePlanError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func writePlanError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, evacuate.ErrBadPlan) {
		code = http.StatusBadRequest
	}
	writeError(w, code, err.Error())
}

func planRequestOf(r *http.Request) (api.PlanRequest, error) {
	q := r.URL.Query()
	var req api.PlanRequest
	for _, t := range strings.Split(q.Get("to"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			req.Targets = append(req.Targets, t)
		}
	}
	for name, v := range map[string]*int{"parallel": &req.Parallel, "bandwidthMiBs": &req.BandwidthMiBs} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return req, fmt.Errorf("%s %q is not a count", name, s)
			}
			*v = n
		}
	}
	return req, evacuate.ValidRequest(req)
}

// lastPlanSeconds is the last plan's predicted evacuation, for /metrics.
func (d *Daemon) lastPlanSeconds() (float64, bool) {
	return d.evac.LastPlanSeconds()
}

// slotUse is the node's slots for the migrations Ferry drives, for /metrics.
func (d *Daemon) slotUse() []metrics.SlotUse {
	var out []metrics.SlotUse
	if d.source != nil {
		st := d.source.SlotStatus()
		out = append(out, metrics.SlotUse{Direction: "outbound", Max: st.Max, Used: st.Used, Queued: st.Queued, Hung: st.Hung})
	}
	if d.Proxy != nil {
		max, used := d.Proxy.InboundSlots()
		out = append(out, metrics.SlotUse{Direction: "inbound", Max: max, Used: used})
	}
	return out
}
