package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"superego/experiment"
	"superego/flow"
	"superego/segment"
)

// The store keeps experiments beside the log (experiment.Store) and model
// replies (agents.ReplyCache), as the SQLite store does. Writes go through
// the writer with the log's, in its group commits.
var _ experiment.Store = (*Store)(nil)

// writeTables queues statements for the experiment tables and waits until
// they are durable.
func (s *Store) writeTables(exec func(b *pgx.Batch)) error {
	return flow.Wait(func(done func(error)) { s.Enqueue(segment.Write[own]{Own: own{exec: exec}, Done: done}) })
}

func experimentSum(r experiment.Record) int64 {
	var sum segment.Sum
	sum.String(r.ID).String(r.Name).Int(r.CreatedAt.UnixMicro()).String(r.Status).Bytes(r.Plan)
	if r.Out != "" { // rows from before it was kept have no out, and their sums stay
		sum.String(r.Out)
	}
	return sum.Value()
}

// optional is a text column's value: NULL for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func outcomeSum(id string, k experiment.Kept) int64 {
	var sum segment.Sum
	return sum.String(id).String(k.Condition).String(k.Label).String(k.SampleID).Int(int64(k.Repeat)).String(k.Instance).Bytes(k.Outcome).Value()
}

// CreateExperiment writes a new experiment.
func (s *Store) CreateExperiment(ctx context.Context, r experiment.Record) error {
	r.CreatedAt = r.CreatedAt.Truncate(time.Microsecond)
	err := s.writeTables(func(b *pgx.Batch) {
		b.Queue(`INSERT INTO experiments (id, name, created_at, status, plan, out, sum) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			r.ID, r.Name, r.CreatedAt, r.Status, string(r.Plan), optional(r.Out), experimentSum(r))
	})
	if err != nil {
		return fmt.Errorf("create experiment %s: %w", r.ID, err)
	}
	return nil
}

// UpdateExperiment writes an experiment's status, plan and report, and
// its out where r's is set.
func (s *Store) UpdateExperiment(ctx context.Context, r experiment.Record) error {
	old, err := s.experiment(ctx, r.ID, false) // its report is replaced, not read
	if err != nil {
		return err
	}
	old.Status, old.Plan, old.Report = r.Status, r.Plan, r.Report
	if r.Out != "" {
		old.Out = r.Out
	}
	var report *string
	var reported *int64
	if old.Report != nil {
		text, sum := string(old.Report), reportSum(old.ID, old.Report)
		report, reported = &text, &sum
	}
	err = s.writeTables(func(b *pgx.Batch) {
		b.Queue(`UPDATE experiments SET status = $1, plan = $2, out = $3, sum = $4, report = $5, report_sum = $6 WHERE id = $7`,
			old.Status, string(old.Plan), optional(old.Out), experimentSum(old), report, reported, old.ID)
	})
	if err != nil {
		return fmt.Errorf("update experiment %s: %w", r.ID, err)
	}
	return nil
}

// reportSum is the checksum of an experiment's report, apart from its
// row's, which a listing checks without reading the report.
func reportSum(id string, report []byte) int64 {
	var sum segment.Sum
	return sum.String(id).Bytes(report).Value()
}

const experimentColumns = `id, name, created_at, status, plan, out, sum`

// scanExperiment reads a row of experimentColumns, and with report, of
// report and report_sum after them.
func scanExperiment(row pgx.Row, report bool) (experiment.Record, error) {
	var r experiment.Record
	var plan string
	var out, kept *string
	var sum int64
	var keptSum *int64
	dest := []any{&r.ID, &r.Name, &r.CreatedAt, &r.Status, &plan, &out, &sum}
	if report {
		dest = append(dest, &kept, &keptSum)
	}
	if err := row.Scan(dest...); err != nil {
		return r, err
	}
	if out != nil {
		r.Out = *out
	}
	r.CreatedAt, r.Plan = r.CreatedAt.UTC(), []byte(plan)
	if sum != experimentSum(r) {
		return r, fmt.Errorf("experiment %q: %w", r.ID, flow.ErrCorrupt)
	}
	if kept != nil {
		r.Report = []byte(*kept)
		if keptSum == nil || *keptSum != reportSum(r.ID, r.Report) {
			return r, fmt.Errorf("experiment %q: its report: %w", r.ID, flow.ErrCorrupt)
		}
	}
	return r, nil
}

// Experiment reads an experiment, with its report.
func (s *Store) Experiment(ctx context.Context, id string) (experiment.Record, error) {
	return s.experiment(ctx, id, true)
}

// experiment reads an experiment, with its report or without.
func (s *Store) experiment(ctx context.Context, id string, report bool) (experiment.Record, error) {
	columns := experimentColumns
	if report {
		columns += `, report, report_sum`
	}
	r, err := scanExperiment(s.read.QueryRow(ctx, `SELECT `+columns+` FROM experiments WHERE id = $1`, id), report)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("experiment %q: %w", id, flow.ErrNotFound)
	}
	return r, err
}

// Experiments reads every experiment, newest first, without its report.
func (s *Store) Experiments(ctx context.Context) ([]experiment.Record, error) {
	rows, err := s.read.Query(ctx, `SELECT `+experimentColumns+` FROM experiments ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list experiments: %w", err)
	}
	defer rows.Close()
	var out []experiment.Record
	for rows.Next() {
		r, err := scanExperiment(rows, false)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// BeginOutcome records the instance that runs a slot.
func (s *Store) BeginOutcome(ctx context.Context, id string, slot experiment.Slot, instance string) error {
	k := experiment.Kept{Slot: slot, Instance: instance}
	err := s.writeTables(func(b *pgx.Batch) {
		b.Queue(`INSERT INTO experiment_outcomes (experiment_id, condition, label, sample_id, repeat_index, instance_id, outcome, sum)
			VALUES ($1, $2, $3, $4, $5, $6, NULL, $7)
			ON CONFLICT (experiment_id, condition, label, sample_id, repeat_index) DO UPDATE SET instance_id = EXCLUDED.instance_id, outcome = NULL, sum = EXCLUDED.sum`,
			id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat, instance, outcomeSum(id, k))
	})
	if err != nil {
		return fmt.Errorf("experiment %s: begin outcome: %w", id, err)
	}
	return nil
}

// FinishOutcome records a slot's outcome. Only the session that began the
// slot writes it, so the instance read before the write is the row's.
func (s *Store) FinishOutcome(ctx context.Context, id string, slot experiment.Slot, outcome []byte) error {
	var instance string
	if err := s.read.QueryRow(ctx, `SELECT instance_id FROM experiment_outcomes WHERE experiment_id = $1 AND condition = $2 AND label = $3 AND sample_id = $4 AND repeat_index = $5`,
		id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat).Scan(&instance); err != nil {
		return fmt.Errorf("experiment %s: finish outcome: %w", id, err)
	}
	k := experiment.Kept{Slot: slot, Instance: instance, Outcome: outcome}
	err := s.writeTables(func(b *pgx.Batch) {
		b.Queue(`UPDATE experiment_outcomes SET outcome = $1, sum = $2 WHERE experiment_id = $3 AND condition = $4 AND label = $5 AND sample_id = $6 AND repeat_index = $7 AND instance_id = $8`,
			string(outcome), outcomeSum(id, k), id, slot.Condition, slot.Label, slot.SampleID, slot.Repeat, instance)
	})
	if err != nil {
		return fmt.Errorf("experiment %s: finish outcome: %w", id, err)
	}
	return nil
}

// Outcomes reads an experiment's slots, each checked.
func (s *Store) Outcomes(ctx context.Context, id string) ([]experiment.Kept, error) {
	if _, err := s.Experiment(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.read.Query(ctx, `SELECT condition, label, sample_id, repeat_index, instance_id, outcome, sum FROM experiment_outcomes WHERE experiment_id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", id, err)
	}
	defer rows.Close()
	var out []experiment.Kept
	for rows.Next() {
		var k experiment.Kept
		var outcome *string
		var sum int64
		if err := rows.Scan(&k.Condition, &k.Label, &k.SampleID, &k.Repeat, &k.Instance, &outcome, &sum); err != nil {
			return nil, err
		}
		if outcome != nil {
			k.Outcome = []byte(*outcome)
		}
		if sum != outcomeSum(id, k) {
			return nil, fmt.Errorf("experiment %q: the outcome of %s, %s %s, repeat %d: %w", id, k.Condition, k.Label, k.SampleID, k.Repeat, flow.ErrCorrupt)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func replySum(key string, reply []byte) int64 {
	var sum segment.Sum
	return sum.String(key).Bytes(reply).Value()
}

// Reply reads a kept model reply; a row whose checksum does not match is an
// error, which the agent takes as a miss.
func (s *Store) Reply(ctx context.Context, key string) ([]byte, bool, error) {
	var reply string
	var sum int64
	err := s.read.QueryRow(ctx, `SELECT reply, sum FROM reply_cache WHERE key = $1`, key).Scan(&reply, &sum)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reply cache: %w", err)
	case sum != replySum(key, []byte(reply)):
		return nil, false, fmt.Errorf("reply cache: %w", flow.ErrCorrupt)
	}
	return []byte(reply), true, nil
}

// Keep queues a model reply for the cache and returns at once; a key kept
// already keeps its reply.
func (s *Store) Keep(ctx context.Context, key string, reply []byte) error {
	s.Enqueue(segment.Write[own]{Own: own{exec: func(b *pgx.Batch) {
		b.Queue(`INSERT INTO reply_cache (key, reply, sum) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`, key, string(reply), replySum(key, reply))
	}}, Done: func(error) {}})
	return nil
}
