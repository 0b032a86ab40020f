package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	sample := map[[2]string]int{}
	for i, s := range plan.Samples {
		sample[[2]string{s.Label, s.ID}] = i
	}
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

// Report computes the experiment's report from its outcomes so far.
func (l *Lab) Report(ctx context.Context, id string) (*Report, error) {
	rec, plan, err := l.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return l.report(ctx, rec, plan)
}

func (l *Lab) report(ctx context.Context, rec Record, plan *Plan) (*Report, error) {
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

// Get is the experiment with its progress and report.
func (l *Lab) Get(ctx context.Context, id string) (View, error) {
	rec, plan, err := l.load(ctx, id)
	if err != nil {
		return View{}, err
	}
	rep, err := l.report(ctx, rec, plan)
	if err != nil {
		return View{}, err
	}
	v := View{ID: rec.ID, Name: rec.Name, Status: rec.Status, CreatedAt: rec.CreatedAt, Conditions: names(plan), Report: rep}
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
