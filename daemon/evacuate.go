package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/evacuate"
)

// startEvacuation answers POST /v1/evacuations: it plans, and runs the
// plan in the background (evacuate.Runner); GET /v1/evacuation follows
// it.
func (d *Daemon) startEvacuation(w http.ResponseWriter, r *http.Request) {
	if d.source == nil {
		writeError(w, http.StatusConflict, "this ferryd runs without a migration proxy (--proxy-listen is empty): it moves nothing")
		return
	}
	var req api.PlanRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "evacuation request is not valid JSON: "+err.Error())
		return
	}
	if len(req.Targets) == 0 {
		writeError(w, http.StatusBadRequest, "an evacuation needs at least one target node (ferryctl evacuate --to NODE[,NODE...])")
		return
	}
	if err := evacuate.ValidRequest(req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	release, err := d.evac.Hold(d.cfg.NodeName, req.Targets)
	if err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	p, err := d.plans.Plan(ctx, req)
	cancel()
	if err != nil {
		release()
		writePlanError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, d.evac.Start(p, req.DryRun))
}

// getEvacuation answers GET /v1/evacuation: the one under way, or the last.
func (d *Daemon) getEvacuation(w http.ResponseWriter, _ *http.Request) {
	ev, ok := d.evac.Last()
	if !ok {
		writeError(w, http.StatusNotFound, "no evacuation of this node since ferryd started")
		return
	}
	writeJSON(w, http.StatusOK, ev)
}
