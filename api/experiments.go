package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"superego/experiment"
	"superego/flow"
)

// errNoExperiments answers the experiment routes of a server without a lab.
var errNoExperiments = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "this server runs no experiments"}

// lab returns the server's lab, or the error that says it has none.
func (s *Server) lab() (*experiment.Lab, error) {
	if s.Experiments == nil {
		return nil, errNoExperiments
	}
	return s.Experiments, nil
}

// invalidDocument turns a document's problems into a 400 naming each
// field by its JSON path.
func invalidDocument(err error) error {
	var inv *flow.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	e := &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid experiment: " + inv.Error()}
	for _, p := range inv.Problems {
		e.Fields = append(e.Fields, FieldError{p.Path, p.Message})
	}
	return e
}

// createExperiment serves POST /experiments: the document docs/experiments.md describes, its
// samples inline or its dataset a path under the server's experiments
// directory. It is checked whole before anything runs, then started.
func (s *Server) createExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	var doc experiment.Document
	if err := decode(w, r, &doc); err != nil {
		return err
	}
	plan, err := doc.Check(lab.Env)
	if err != nil {
		return invalidDocument(err)
	}
	rec, err := lab.Create(r.Context(), plan)
	if err != nil {
		return invalidDocument(err)
	}
	if err := lab.Start(r.Context(), rec.ID, experiment.Options{}); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]string{"experiment_id": rec.ID})
	return nil
}

// listExperiments serves GET /experiments.
func (s *Server) listExperiments(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	list, err := lab.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getExperiment serves GET /experiments/{id}: its status, progress and
// report as it stands.
func (s *Server) getExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	v, err := lab.Get(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// experimentReport serves GET /experiments/{id}/report.{format}: the
// report as Markdown tables (md), JSON, CSV, LaTeX tables (tex) or an SVG
// plot, as the command line writes them.
func (s *Server) experimentReport(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	f, err := experiment.FormatOf(chi.URLParam(r, "format"))
	if err != nil || f.Name != chi.URLParam(r, "format") {
		return fmt.Errorf("no report.%s: the report is report.md, .json, .csv, .tex or .svg: %w", chi.URLParam(r, "format"), flow.ErrNotFound)
	}
	rep, err := lab.Report(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	if adjust := r.URL.Query().Get("adjust"); adjust != "" && !rep.AdjustP(adjust) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request",
			Fields: []FieldError{{"adjust", fmt.Sprintf("%q is none of holm, bh, none", adjust)}}}
	}
	w.Header().Set("Content-Type", f.ContentType)
	// The plot is an image on this origin: nothing in it may run, and it
	// is not read as anything else.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if f.Name == "svg" {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	}
	w.Write(rep.Render(f))
	return nil
}

// experimentResults serves GET /experiments/{id}/results.jsonl: a line per
// outcome recorded, visible fields only.
func (s *Server) experimentResults(w http.ResponseWriter, r *http.Request) error {
	results, err := s.results(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, o := range results {
		s.deadline(w) // for each write the buffer makes: a large file over a slow link is not cut off
		if err := enc.Encode(o); err != nil {
			return nil // the client went away
		}
	}
	bw.Flush()
	return nil
}

// experimentResultsCSV serves GET /experiments/{id}/results.csv: the
// outcomes as one flat table, a row each.
func (s *Server) experimentResultsCSV(w http.ResponseWriter, r *http.Request) error {
	results, err := s.results(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	s.deadline(w)
	w.Write(experiment.ResultsCSV(results))
	return nil
}

// results are the outcomes of the experiment the route names.
func (s *Server) results(r *http.Request) ([]experiment.Outcome, error) {
	lab, err := s.lab()
	if err != nil {
		return nil, err
	}
	return lab.Results(r.Context(), chi.URLParam(r, "id"))
}

// cancelExperiment serves POST /experiments/{id}/cancel: its runs in flight
// are cancelled and no outcome starts; resume takes it up again.
func (s *Server) cancelExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	id := chi.URLParam(r, "id")
	if err := lab.Cancel(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"experiment_id": id, "status": experiment.StatusCancelled})
	return nil
}

type resumeRequest struct {
	RetryErrors bool `json:"retry_errors"`
	NoCache     bool `json:"no_cache"`
}

// resumeExperiment serves POST /experiments/{id}/resume: its outcomes not
// finished are run, none twice; with retry_errors, those that failed too.
// An experiment that has finished answers 200 and "completed".
func (s *Server) resumeExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	var req resumeRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	id := chi.URLParam(r, "id")
	err = lab.Start(r.Context(), id, experiment.Options{RetryErrors: req.RetryErrors, NoCache: req.NoCache})
	if errors.Is(err, experiment.ErrFinished) {
		// Not a conflict: what was asked for is done. 200, not 202, and
		// its status, tell a script so.
		writeJSON(w, http.StatusOK, map[string]string{"experiment_id": id, "status": experiment.StatusCompleted,
			"message": "already finished: nothing is left to run (retry_errors runs its failed outcomes again)"})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"experiment_id": id, "status": experiment.StatusRunning})
	return nil
}

// replayExperiment serves POST /experiments/{id}/replay: a counterfactual
// condition that re-judges another's recorded runs, started at once.
func (s *Server) replayExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	var req experiment.ReplayRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	id := chi.URLParam(r, "id")
	c, err := lab.Replay(r.Context(), id, req)
	if err != nil {
		return invalidDocument(err)
	}
	if err := lab.Start(r.Context(), id, experiment.Options{}); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"experiment_id": id, "condition": c.Name, "replays": c.Replay.From, "ask": c.Replay.Ask})
	return nil
}

// compareExperiment serves GET /experiments/{id}/compare?a=A&b=B: the two
// conditions paired, with the samples that flipped.
func (s *Server) compareExperiment(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var fields []FieldError
	for _, name := range []string{"a", "b"} {
		if q.Get(name) == "" {
			fields = append(fields, FieldError{name, "is required: a condition's name"})
		}
	}
	if fields != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request", Fields: fields}
	}
	c, err := lab.Compare(r.Context(), chi.URLParam(r, "id"), q.Get("a"), q.Get("b"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// experimentEvents serves GET /experiments/{id}/events: the experiment's
// progress as Server-Sent Events (progress at once, then outcome and
// progress as outcomes finish, last done). A client that falls behind is
// dropped, and may reconnect: it gets the progress as it stands.
func (s *Server) experimentEvents(w http.ResponseWriter, r *http.Request) error {
	lab, err := s.lab()
	if err != nil {
		return err
	}
	release, err := s.streamSlot()
	if err != nil {
		return err
	}
	defer release()
	watch, err := lab.Subscribe(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	defer watch.Close()
	es := s.eventStream(w)
	if err := es.open(); err != nil {
		return nil
	}
	for n := 1; ; n++ {
		var ev experiment.Event
		var ok bool
		select {
		case ev, ok = <-watch.C:
		case <-r.Context().Done():
			return nil
		}
		if !ok {
			return nil // fell behind: the client reconnects
		}
		frame, err := sseFrame(strconv.Itoa(n), ev.Name, ev.Data)
		if err != nil {
			return err
		}
		if err := es.write(frame, len(watch.C) == 0 || ev.Name == experiment.EventDone); err != nil {
			return nil
		}
		if ev.Name == experiment.EventDone {
			return nil
		}
	}
}
