package segment

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"superego/flow"
)

// Row is a row of an instance's log as a store reads it: its events, first
// to last, their hidden fields and the ids of their steps' texts.
type Row struct {
	First, Last           int64
	Events, Hidden, Texts []byte
}

// Name names the row in an error.
func (r Row) Name() string {
	switch {
	case r.Last == 0:
		return "its first row"
	case r.First == r.Last:
		return fmt.Sprintf("the row of event %d", r.First)
	}
	return fmt.Sprintf("the row of events %d to %d", r.First, r.Last)
}

// TextCache keeps the texts a store has read, by id. Texts never change,
// so each is read from the database once. Its zero value is ready.
type TextCache struct {
	mu    sync.Mutex
	texts map[int64]string
}

// Events decodes an instance's rows into its events after the given id.
// load reads, and checks, the texts the rows name that the cache lacks.
func (c *TextCache) Events(ctx context.Context, id string, rows []Row, after int64, load func(context.Context, []int64) (map[int64]string, error)) ([]flow.Event, error) {
	refs := make([]map[string]Texts, len(rows))
	var missing []int64
	for i, r := range rows {
		var err error
		if refs[i], err = readRefs(r.Texts); err != nil {
			return nil, fmt.Errorf("instance %q: %s: %w", id, r.Name(), err)
		}
		missing = c.missing(missing, refs[i])
	}
	if len(missing) > 0 {
		read, err := load(ctx, missing)
		if err != nil {
			return nil, fmt.Errorf("instance %q: %w", id, err)
		}
		c.mu.Lock()
		if c.texts == nil {
			c.texts = map[int64]string{}
		}
		maps.Copy(c.texts, read)
		c.mu.Unlock()
	}
	var out []flow.Event
	for i, r := range rows {
		events, err := decode(r.Events, r.Hidden, refs[i], after, c.text)
		if err != nil {
			return nil, fmt.Errorf("instance %q: %s: %w", id, r.Name(), err)
		}
		out = append(out, events...)
	}
	return out, nil
}

// missing adds to ids the texts refs names that are not in the cache.
func (c *TextCache) missing(ids []int64, refs map[string]Texts) []int64 {
	if len(refs) == 0 {
		return ids
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range refs {
		for _, id := range []int64{t.Constitution, t.SystemPrompt} {
			if _, ok := c.texts[id]; !ok && id != 0 && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// text returns a text in the cache; "" for 0.
func (c *TextCache) text(id int64) (string, error) {
	if id == 0 {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	body, ok := c.texts[id]
	if !ok {
		return "", fmt.Errorf("text %d: not in the database", id)
	}
	return body, nil
}
