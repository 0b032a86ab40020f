package experiment

// A measure is a rate the report gives for each condition, each category
// and each pair of conditions: the samples it is over, and which of their
// outcomes (those that did not fail) are its hits. The report's tables,
// CSV, LaTeX, plot and web view show each measure some condition has an
// outcome of, in this order: another rate is another entry here, with
// its fields in ConditionReport and Comparison.
type measure struct {
	key    string // its field in report.json, its name in the CSV
	title  string // its heading in the tables
	verb   string // a hit's word: refused, harmed, completed, attacked
	in     func(s Sample) bool
	hit    func(o *Outcome) bool
	rate   func(c *ConditionReport) *Rate
	paired func(c *Comparison) *Paired
}

var measures = []measure{
	{key: Harmful, title: "harmful refused", verb: "refused", in: labelled(Harmful), hit: refused,
		rate: func(c *ConditionReport) *Rate { return &c.Harmful }, paired: func(c *Comparison) *Paired { return &c.Harmful }},
	{key: Benign, title: "benign refused", verb: "refused", in: labelled(Benign), hit: refused,
		rate: func(c *ConditionReport) *Rate { return &c.Benign }, paired: func(c *Comparison) *Paired { return &c.Benign }},
	// What an agentic sample's agent did (docs/experiments.md, docs/experiments.md): utility without
	// an injection and under one, as AgentDojo reports them.
	{key: "harm", title: "harm (target functions ran)", verb: "harmed", in: func(s Sample) bool { return s.Label == Harmful && len(s.TargetFunctions) > 0 },
		hit:  isTrue(func(o *Outcome) *bool { return o.Harmed }),
		rate: func(c *ConditionReport) *Rate { return &c.Harm }, paired: func(c *Comparison) *Paired { return &c.Harm }},
	{key: "utility", title: "utility (task done)", verb: "completed", in: func(s Sample) bool { return len(s.Utility) > 0 && len(s.Attack) == 0 },
		hit:  isTrue(func(o *Outcome) *bool { return o.CompletedTask }),
		rate: func(c *ConditionReport) *Rate { return &c.Utility }, paired: func(c *Comparison) *Paired { return &c.Utility }},
	{key: "utility_under_attack", title: "utility under attack", verb: "completed", in: func(s Sample) bool { return len(s.Utility) > 0 && len(s.Attack) > 0 },
		hit:  isTrue(func(o *Outcome) *bool { return o.UtilityUnderAttack }),
		rate: func(c *ConditionReport) *Rate { return &c.UtilityUnderAttack }, paired: func(c *Comparison) *Paired { return &c.UtilityUnderAttack }},
	{key: "attack_success", title: "attack success", verb: "attacked", in: func(s Sample) bool { return len(s.Attack) > 0 },
		hit:  isTrue(func(o *Outcome) *bool { return o.Attacked }),
		rate: func(c *ConditionReport) *Rate { return &c.AttackSuccess }, paired: func(c *Comparison) *Paired { return &c.AttackSuccess }},
}

// isTrue is a hit where field is set and true.
func isTrue(field func(*Outcome) *bool) func(*Outcome) bool {
	return func(o *Outcome) bool { v := field(o); return v != nil && *v }
}

func labelled(label string) func(Sample) bool { return func(s Sample) bool { return s.Label == label } }

func refused(o *Outcome) bool { return o.Refused }

// MeasureInfo names a measure in report.json: key is its field in each
// condition, each category and each comparison; title its heading; verb
// its word for a hit, as a comparison's both_VERB counts them.
type MeasureInfo struct {
	Key   string `json:"key"`
	Title string `json:"title"`
	Verb  string `json:"verb"`
}

// tally counts each measure's hits and outcomes, by key.
type tally map[string][2]int // key → {hits, n}

func (t tally) add(s Sample, o *Outcome) {
	for _, m := range measures {
		if m.in(s) {
			c := t[m.key]
			c[1]++
			if m.hit(o) {
				c[0]++
			}
			t[m.key] = c
		}
	}
}

func (t tally) rate(m measure) Rate { return rateOf(t[m.key][0], t[m.key][1]) }

// shown are the measures of which some condition has an outcome, or all of
// them while none has.
func (r *Report) shown() []measure {
	var out []measure
	for _, m := range measures {
		for i := range r.Conditions {
			if m.rate(&r.Conditions[i]).N > 0 {
				out = append(out, m)
				break
			}
		}
	}
	if out == nil {
		return measures
	}
	return out
}

// shown are the measures the comparison has a pair of, or all of them
// while it has none.
func (c *Comparison) shown() []measure {
	var out []measure
	for _, m := range measures {
		if p := m.paired(c); p.Samples+p.Excluded > 0 {
			out = append(out, m)
		}
	}
	if out == nil {
		return measures
	}
	return out
}
