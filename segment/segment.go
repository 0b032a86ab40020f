// Package segment encodes an instance's log as the SQL stores keep it, so
// that SQLite and PostgreSQL write and read the same rows. A segment is
// the events one commit writes for one instance: a JSON array of what a
// client may see, the steps' hidden fields in a JSON object of their own,
// by event id, and the ids of the steps' constitutions and system prompts,
// which a table of texts keeps once.
//
// Hidden fields never reach the array: a step's JSON leaves them out, and
// Encode writes them apart. A row carries a checksum (Sum) over its
// columns, so that a row whose bytes changed after it was written is
// reported on reading instead of served.
package segment

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"superego/flow"
)

// TimeFormat is fixed-width, so times sort as text.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// Event is an event as a store writes it.
type Event struct {
	flow.Event
	JSON   []byte // what a client may see
	Hidden []byte // a step's hidden fields; nil for other events
	// A step's texts, left out of JSON when they are kept apart.
	Constitution, SystemPrompt string
}

// Encode encodes an event's visible JSON and a step's hidden fields; with
// apart, a step's texts are left out of its JSON, to be kept once.
func Encode(e flow.Event, apart bool) (Event, error) {
	w := Event{Event: e}
	data := e.Data
	if step, ok := data.(*flow.Step); ok {
		w.Hidden, _ = json.Marshal(flow.HiddenOf(*step)) // strings and tool uses of valid JSON: cannot fail
		if apart {
			w.Constitution, w.SystemPrompt = step.Constitution, step.SystemPrompt
			bare := *step // the event's step is shared: it stays whole
			bare.Constitution, bare.SystemPrompt = "", ""
			data = &bare
		}
	}
	var err error
	if w.JSON, err = json.Marshal(data); err != nil {
		return w, fmt.Errorf("encode %s event: %w", e.Name, err)
	}
	return w, nil
}

// Texts are the ids of a step's constitution and system prompt in the
// table of texts; 0 for none.
type Texts struct {
	Constitution int64 `json:"constitution,omitempty"`
	SystemPrompt int64 `json:"system_prompt,omitempty"`
}

// Segment is the events one commit writes for one instance.
type Segment struct {
	First, Last int64
	LastTime    time.Time
	Steps       int
	Status      string // the status after the segment; "" if it holds no run_start or done

	events, hidden, texts []byte
}

// Add encodes an instance's events in the segment, each step's texts by
// the ids textID gives them. Ids only grow.
func (s *Segment) Add(instance string, events []Event, textID func(body string) (int64, error)) error {
	for _, e := range events {
		var c, p int64
		var err error
		if e.Constitution != "" {
			if c, err = textID(e.Constitution); err != nil {
				return err
			}
		}
		if e.SystemPrompt != "" {
			if p, err = textID(e.SystemPrompt); err != nil {
				return err
			}
		}
		if e.ID <= s.Last {
			return fmt.Errorf("instance %s: event %d after %d: ids only grow", instance, e.ID, s.Last)
		}
		s.add(e, c, p)
	}
	return nil
}

// add encodes an event, with the ids of its step's texts. Names and times
// need no escaping.
func (s *Segment) add(e Event, constitution, systemPrompt int64) {
	if s.First == 0 {
		s.First = e.ID
	}
	s.Last, s.LastTime = e.ID, e.Time
	s.events = append(s.events, `,{"id":`...)
	s.events = strconv.AppendInt(s.events, e.ID, 10)
	s.events = append(append(append(s.events, `,"name":"`...), e.Name...), `","time":"`...)
	s.events = e.Time.UTC().AppendFormat(s.events, TimeFormat)
	s.events = append(append(append(s.events, `","data":`...), e.JSON...), '}')
	switch d := e.Data.(type) {
	case *flow.Step:
		s.Steps++
		s.hidden = append(strconv.AppendInt(append(s.hidden, `,"`...), e.ID, 10), `":`...)
		s.hidden = append(s.hidden, e.Hidden...)
		if constitution != 0 || systemPrompt != 0 {
			s.texts = append(strconv.AppendInt(append(s.texts, `,"`...), e.ID, 10), `":`...)
			ids, _ := json.Marshal(Texts{constitution, systemPrompt}) // two numbers: cannot fail
			s.texts = append(s.texts, ids...)
		}
	case flow.RunStart:
		s.Status = flow.StatusRunning
	case flow.Done:
		s.Status = d.Status
	}
}

// Columns are the segment's events, hidden fields and texts as JSON; nil
// where it has none.
func (s *Segment) Columns() (events, hidden, texts []byte) {
	// Each list was begun with a comma for its first item.
	if len(s.events) > 0 {
		s.events[0] = '['
		events = append(s.events, ']')
	}
	if len(s.hidden) > 0 {
		s.hidden[0] = '{'
		hidden = append(s.hidden, '}')
	}
	if len(s.texts) > 0 {
		s.texts[0] = '{'
		texts = append(s.texts, '}')
	}
	return events, hidden, texts
}

// readRefs reads a row's texts column: each step's texts, by event id.
func readRefs(texts []byte) (map[string]Texts, error) {
	if texts == nil {
		return nil, nil
	}
	var refs map[string]Texts
	if err := json.Unmarshal(texts, &refs); err != nil {
		return nil, err
	}
	return refs, nil
}

// decode rebuilds a row's events after the given id, each step with its
// hidden fields and, through text, its texts.
func decode(events, hidden []byte, refs map[string]Texts, after int64, text func(id int64) (string, error)) ([]flow.Event, error) {
	if events == nil {
		return nil, nil // an instance's first row, created without a run
	}
	var seg []struct {
		ID   int64           `json:"id"`
		Name string          `json:"name"`
		Time string          `json:"time"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(events, &seg); err != nil {
		return nil, err
	}
	h := map[string]flow.Hidden{}
	if hidden != nil {
		if err := json.Unmarshal(hidden, &h); err != nil {
			return nil, err
		}
	}
	out := make([]flow.Event, 0, len(seg))
	for _, raw := range seg {
		if raw.ID <= after {
			continue
		}
		e := flow.Event{ID: raw.ID, Name: raw.Name}
		var err error
		if e.Time, err = time.Parse(TimeFormat, raw.Time); err != nil {
			return nil, fmt.Errorf("event %d: %w", raw.ID, err)
		}
		key := strconv.FormatInt(raw.ID, 10)
		if e.Data, err = flow.DecodeEvent(raw.Name, raw.Data, h[key]); err != nil {
			return nil, fmt.Errorf("event %d: %w", raw.ID, err)
		}
		if step, ok := e.Data.(*flow.Step); ok && refs[key] != (Texts{}) {
			ids := refs[key]
			if step.Constitution, err = text(ids.Constitution); err != nil {
				return nil, fmt.Errorf("event %d: %w", raw.ID, err)
			}
			if step.SystemPrompt, err = text(ids.SystemPrompt); err != nil {
				return nil, fmt.Errorf("event %d: %w", raw.ID, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// DecodeHeld rebuilds a held event, which keeps its texts inline.
func DecodeHeld(name string, data, hidden []byte) (flow.Event, error) {
	var h flow.Hidden
	if hidden != nil {
		if err := json.Unmarshal(hidden, &h); err != nil {
			return flow.Event{}, err
		}
	}
	d, err := flow.DecodeEvent(name, data, h)
	return flow.Event{Name: name, Data: d}, err
}

// Sum is a checksum of a row, its columns added in order: CRC-32C, which
// the processor computes, over each column's length and bytes, a NULL
// apart from an empty value. It finds a changed byte, not a forger, who
// could write a matching sum as easily. Its zero value is ready; its
// buffer lets a row be summed with one allocation at most.
type Sum struct {
	crc uint32
	buf [64]byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Bytes adds a column; nil is NULL.
func (s *Sum) Bytes(b []byte) *Sum {
	l := 0
	if b != nil {
		l = len(b) + 1
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.buf[:binary.PutUvarint(s.buf[:], uint64(l))])
	s.crc = crc32.Update(s.crc, castagnoli, b)
	return s
}

// String adds a column of text.
func (s *Sum) String(v string) *Sum {
	s.crc = crc32.Update(s.crc, castagnoli, s.buf[:binary.PutUvarint(s.buf[:], uint64(len(v)+1))])
	for len(v) > 0 {
		n := copy(s.buf[:], v)
		s.crc = crc32.Update(s.crc, castagnoli, s.buf[:n])
		v = v[n:]
	}
	return s
}

// Null adds a column that is NULL.
func (s *Sum) Null() *Sum {
	return s.Bytes(nil)
}

// Int adds a column of an integer.
func (s *Sum) Int(v int64) *Sum {
	s.crc = crc32.Update(s.crc, castagnoli, s.buf[:binary.PutVarint(s.buf[:], v)])
	return s
}

// Value is the sum, as a database's integer holds it.
func (s *Sum) Value() int64 {
	return int64(s.crc)
}

// Tags is an instance's tags as its first row keeps them: a JSON object,
// sorted by name (the same tags, the same text); nil for none, a NULL.
func Tags(tags map[string]string) []byte {
	if len(tags) == 0 {
		return nil
	}
	b, _ := json.Marshal(tags)
	return b
}

// ReadTags reads the tags column of instance id; "" is NULL, none.
func ReadTags(id, col string) (map[string]string, error) {
	if col == "" {
		return nil, nil
	}
	var tags map[string]string
	if err := json.Unmarshal([]byte(col), &tags); err != nil {
		return nil, fmt.Errorf("instance %q: tags: %w", id, err)
	}
	return tags, nil
}
