package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ferry-vm/ferry/api"
	"github.com/ferry-vm/ferry/drive"
	"github.com/ferry-vm/ferry/libvirtx"
	"github.com/ferry-vm/ferry/migration"
)

// check answers whether a domain can move: GET reads its live XML, POST
// with a target also asks that target through a dry run.
func (d *Daemon) check(w http.ResponseWriter, r *http.Request) {
	name, socket := r.PathValue("name"), socketParam(r)
	var req *api.DryRunRequest
	if r.Method == http.MethodPost {
		req = &api.DryRunRequest{}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(req); err != nil {
			writeError(w, http.StatusBadRequest, "dry-run request is not valid JSON: "+err.Error())
			return
		}
		if req.Socket != "" {
			socket = filepath.Clean(req.Socket) // as ?socket= is
		}
		if d.source == nil {
			writeError(w, http.StatusConflict, "this ferryd runs without a migration proxy (--proxy-listen is empty): it has no dry run")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	resp, err := d.checks.Check(ctx, socket, name)
	if err != nil {
		code := http.StatusBadGateway
		switch {
		case errors.Is(err, migration.ErrNoJob), libvirtx.IsNoDomain(err):
			code = http.StatusNotFound
		case errors.Is(err, migration.ErrAmbiguous):
			code = http.StatusConflict
		case errors.Is(err, migration.ErrNoLibvirt):
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, err.Error())
		return
	}
	if req != nil {
		dr, err := d.source.DryRun(ctx, drive.MigrateRequest{Domain: name, Socket: socket, Target: req.Target, TargetNode: req.TargetNode, PostCopy: req.PostCopy, DataPath: req.DataPath})
		switch {
		case errors.Is(err, drive.ErrBadRequest):
			writeError(w, http.StatusBadRequest, err.Error())
			return
		case errors.Is(err, drive.ErrConflict):
			writeError(w, http.StatusConflict, err.Error())
			return
		case err != nil:
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
		resp.DryRun = &dr
		resp.Migratable = resp.Migratable && dr.OK
	}
	writeJSON(w, http.StatusOK, resp)
}
