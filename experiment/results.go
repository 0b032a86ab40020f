package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"superego/flow"
)

// View is an experiment as GET /experiments/{id} shows it.
type View struct {
	ID         string    `json:"experiment_id"`
	Name       string    `json:"name"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	Conditions []string  `json:"conditions"`
	Progress   Progress  `json:"progress"`
	Report     *Report   `json:"report"`
}

// Summary is an experiment as listed.
type Summary struct {
	ID         string    `json:"experiment_id"`
	Name       string    `json:"name"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	Conditions []string  `json:"conditions"`
}

// load reads an experiment's record and plan.
func (l *Lab) load(ctx context.Context, id string) (Record, *Plan, error) {
	rec, err := l.Store.Experiment(ctx, id)
	if err != nil {
		return Record{}, nil, err
	}
	plan, err := DecodePlan(rec.Plan)
	if err != nil {
		return Record{}, nil, fmt.Errorf("experiment %s: %w", id, err)
	}
	return rec, plan, nil
}

// List lists the experiments, newest first.
func (l *Lab) List(ctx context.Context) ([]Summary, error) {
	recs, err := l.Store.Experiments(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(recs))
	for _, r := range recs {
		plan, err := DecodePlan(r.Plan)
		if err != nil {
			return nil, fmt.Errorf("experiment %s: %w", r.ID, err)
		}
		out = append(out, Summary{r.ID, r.Name, r.Status, r.CreatedAt, names(plan)})
	}
	return out, nil
}

func names(p *Plan) []string {
	out := make([]string, len(p.Conditions))
	for i, c := range p.Conditions {
		out[i] = c.Name
	}
	return out
}

// Results are the experiment's outcomes recorded so far, in the plan's
// order: by repeat, sample and condition.
func (l *Lab) Results(ctx context.Context, id string) ([]Outcome, error) {
	_, plan, err := l.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.results(ctx, id, plan)
}

func (l *Lab) results(ctx context.Context, id string, plan *Plan) ([]Outcome, error) {
	kept, err := l.Store.Outcomes(ctx, id)
	if err != nil {
		return nil, err
	}
	sample := plan.sampleIndex()
	cond := map[string]int{}
	for i, c := range plan.Conditions {
		cond[c.Name] = i
	}
	slices.SortFunc(kept, func(a, b Kept) int {
		return cmp.Or(cmp.Compare(a.Repeat, b.Repeat), cmp.Compare(sample[[2]string{a.Label, a.SampleID}], sample[[2]string{b.Label, b.SampleID}]),
			cmp.Compare(cond[a.Condition], cond[b.Condition]))
	})
	out := make([]Outcome, 0, len(kept))
	for _, k := range kept {
		if k.Outcome == nil {
			continue
		}
		var o Outcome
		if err := json.Unmarshal(k.Outcome, &o); err != nil {
			return nil, fmt.Errorf("experiment %s: the outcome of %s, %s %s, repeat %d: %w", id, k.Condition, k.Label, k.SampleID, k.Repeat, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Report is the experiment's report as it stands: the one kept when it
// completed, or, while it runs (or where none was kept), one made from
// its outcomes (reports.get says how recently).
func (l *Lab) Report(ctx context.Context, id string) (*Report, error) {
	rec, err := l.Store.Experiment(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.report(ctx, rec)
}

// report is Report of rec. Where the report kept is served, the plan,
// which may hold a million samples, is not even read: what the view
// shows of it is in the report.
func (l *Lab) report(ctx context.Context, rec Record) (*Report, error) {
	if rep := keptReport(rec); rep != nil {
		return rep, nil
	}
	// One made while the experiment had another status is of other outcomes.
	// The plan, which may hold a million samples, is decoded only to make
	// one: a reader served the one made does not pay for it.
	rep, err := l.reports.get(ctx, rec.ID+" "+rec.Status, func(ctx context.Context) (*Report, error) {
		plan, err := DecodePlan(rec.Plan)
		if err != nil {
			return nil, fmt.Errorf("experiment %s: %w", rec.ID, err)
		}
		return l.makeReport(ctx, rec, plan)
	})
	if err != nil {
		return nil, err
	}
	r := *rep // the readers' own: they share the one made
	return &r, nil
}

// makeReport makes the report of the outcomes recorded so far.
func (l *Lab) makeReport(ctx context.Context, rec Record, plan *Plan) (*Report, error) {
	outcomes, err := l.results(ctx, rec.ID, plan)
	if err != nil {
		return nil, err
	}
	j, err := newJudge(nil, plan.RefusalJudge, nil)
	if err != nil {
		return nil, err
	}
	return buildReport(rec, plan, outcomes, j.describe()), nil
}

// reportVersion is the version of what a report holds and how it is
// made. Raise it with every change to either: a report kept by a server
// of another version is not served, but made again from the outcomes.
const reportVersion = 1

// kept is a report as the lab keeps it (Record.Report).
type kept struct {
	Version int     `json:"version"`
	Report  *Report `json:"report"`
}

// keepReport is the report of an experiment's outcomes, made as its
// session completes it, to keep with that status.
func (l *Lab) keepReport(ctx context.Context, rec Record, plan *Plan) ([]byte, error) {
	rep, err := l.makeReport(ctx, rec, plan)
	if err != nil {
		return nil, err
	}
	return json.Marshal(kept{reportVersion, rep})
}

// keptReport reads the report kept of a completed experiment: nil where
// there is none, or it is of another version.
func keptReport(rec Record) *Report {
	var k kept
	if rec.Status != StatusCompleted || rec.Report == nil || json.Unmarshal(rec.Report, &k) != nil || k.Version != reportVersion {
		return nil
	}
	return k.Report
}

// Get is the experiment with its progress and report.
func (l *Lab) Get(ctx context.Context, id string) (View, error) {
	rec, err := l.Store.Experiment(ctx, id)
	if err != nil {
		return View{}, err
	}
	rep, err := l.report(ctx, rec)
	if err != nil {
		return View{}, err
	}
	v := View{ID: rec.ID, Name: rec.Name, Status: rec.Status, CreatedAt: rec.CreatedAt, Report: rep}
	for _, c := range rep.Conditions { // the plan's, in its order
		v.Conditions = append(v.Conditions, c.Name)
	}
	l.mu.Lock()
	r := l.runs[id]
	l.mu.Unlock()
	if r != nil {
		r.mu.Lock()
		v.Progress = r.snapshot()
		r.mu.Unlock()
		return v, nil
	}
	v.Progress.Total, v.Progress.Done = rep.Total, rep.Outcomes
	for _, c := range rep.Conditions {
		v.Progress.Errors += c.Errors
	}
	return v, nil
}

// Compare pairs two of the experiment's conditions.
func (l *Lab) Compare(ctx context.Context, id, a, b string) (*Comparison, error) {
	_, plan, err := l.load(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{a, b} {
		if _, ok := plan.condition(name); !ok {
			return nil, fmt.Errorf("experiment %s has no condition %q (its conditions: %v): %w", id, name, names(plan), flow.ErrNotFound)
		}
	}
	outcomes, err := l.results(ctx, id, plan)
	if err != nil {
		return nil, err
	}
	c := compare(plan, a, b, byCondition(outcomes))
	return &c, nil
}

// reports are reports made from outcomes, by experiment and status:
// those of experiments that run, or that ended with none kept. Each is
// made again once it is older than fresh; meanwhile one reader makes it,
// and the others are served the one before (or, where there is none, wait
// for it). So readers, however many, make at most one report of an
// experiment at a time, each taking the time and memory of reading every
// outcome, and a watched experiment spends about a tenth of a core at
// most on its report.
type reports struct {
	mu sync.Mutex
	by map[string]*made
}

// made is an experiment's report as last made.
type made struct {
	rep    *Report
	at     time.Time     // when it was made
	took   time.Duration // how long making it took
	read   time.Time     // when it was last asked for
	making chan struct{} // closed when the one being made is; nil when none is
	err    error         // of the last that failed
}

// minFresh is how long a report made is served at least.
const minFresh = 2 * time.Second

// fresh is how long a report made is served: ten times what making it
// took, at least minFresh.
func (m *made) fresh() time.Duration { return max(minFresh, 10*m.took) }

// forgetAfter is how long a report no one asks for is kept.
const forgetAfter = 5 * time.Minute

// get returns the report of key, made by build where none is fresh:
// the first reader makes it, and the readers that come meanwhile wait for
// it, or are served the one before where there is one.
func (c *reports) get(ctx context.Context, key string, build func(context.Context) (*Report, error)) (*Report, error) {
	now := time.Now()
	c.mu.Lock()
	for other, m := range c.by {
		if m.making == nil && now.Sub(m.read) > forgetAfter {
			delete(c.by, other)
		}
	}
	m := c.by[key]
	if m == nil {
		m = &made{}
		if c.by == nil {
			c.by = map[string]*made{}
		}
		c.by[key] = m
	}
	m.read = now
	switch {
	case m.rep != nil && (m.making != nil || now.Sub(m.at) < m.fresh()):
		rep := m.rep
		c.mu.Unlock()
		return rep, nil
	case m.making != nil:
		making := m.making
		c.mu.Unlock()
		select {
		case <-making:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return m.rep, m.err
	}
	m.making = make(chan struct{})
	c.mu.Unlock()
	start := time.Now()
	rep, err := build(context.WithoutCancel(ctx)) // for the readers waiting too
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.err = err; err == nil {
		m.rep, m.at, m.took = rep, time.Now(), time.Since(start)
	}
	close(m.making)
	m.making = nil
	return rep, err
}
