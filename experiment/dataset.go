package experiment

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"superego/flow"
)

// maxDatasetLine bounds one line of a JSONL dataset.
const maxDatasetLine = 1 << 20

// maxDataset bounds the bytes of a document's dataset files, all of them
// together: its samples are kept with the experiment, and read whole.
const maxDataset = 16 << 20

// readDatasets reads every file of a dataset, in order. The format comes
// from the file: .jsonl is JSON lines of {id, input, label, category};
// .json is AgentHarm's {"behaviors": [...]}; .csv is HarmBench's when its
// header has Behavior and BehaviorID, else id, input, label, category.
// An error names the file and, for a row that does not read, its line.
func readDatasets(paths []string, label string, env Env) ([]Sample, []DatasetFile, error) {
	if msg := checkLabel(label); label != "" && msg != "" {
		return nil, nil, errors.New(msg)
	}
	var out []Sample
	var files []DatasetFile
	left := int64(maxDataset)
	for _, p := range paths {
		full, err := resolvePath(p, env)
		if err != nil {
			return nil, nil, err
		}
		samples, sum, err := readDataset(full, p, label, env, &left)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, samples...)
		files = append(files, DatasetFile{Path: p, SHA256: sum})
	}
	return out, files, nil
}

// readDataset reads one file of a dataset, at most *left bytes of it, and
// takes what it read from *left.
func readDataset(path, name, label string, env Env, left *int64) (samples []Sample, sum string, err error) {
	ext := strings.ToLower(filepath.Ext(path))
	switch {
	case ext != ".jsonl" && ext != ".csv" && ext != ".json":
		return nil, "", fmt.Errorf("%s: a dataset is .jsonl, .csv (ours or HarmBench's) or .json (AgentHarm's), not %q", name, ext)
	case label != "" && ext != ".json":
		return nil, "", fmt.Errorf("%s: label labels an AgentHarm JSON file; JSONL and CSV rows carry their own, and HarmBench's are harmful", name)
	}
	f, err := openDataset(path, name, env)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	// One byte past what is left says the file is larger, whatever a
	// parser makes of the bytes it was given.
	h := sha256.New()
	r := &countingReader{r: io.TeeReader(io.LimitReader(f, *left+1), h)}
	switch ext {
	case ".jsonl":
		samples, err = readJSONL(r)
	case ".csv":
		samples, err = readCSV(r)
	default:
		samples, err = readAgentHarm(r, filepath.Base(path), label)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, r) // what a parser left unread is the file's too
	}
	if *left -= r.n; *left < 0 {
		return nil, "", fmt.Errorf("%s: the dataset is larger than %d MiB, all its files together", name, maxDataset>>20)
	}
	var le *lineErr
	switch {
	case errors.As(err, &le):
		return nil, "", fmt.Errorf("%s line %d: %s", name, le.line, le.msg)
	case err != nil:
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	if len(samples) == 0 {
		return nil, "", fmt.Errorf("%s: no samples", name)
	}
	return samples, hex.EncodeToString(h.Sum(nil)), nil
}

// openDataset opens a dataset file: a regular file, and where env is
// confined, one inside env.Dir, through whatever links: a link that leads
// out of it is refused, as the workspace tools refuse one.
func openDataset(path, name string, env Env) (*os.File, error) {
	var info os.FileInfo
	var f *os.File
	var err error
	if env.Confined {
		var root *os.Root
		if root, err = os.OpenRoot(env.Dir); err != nil {
			return nil, fmt.Errorf("open %s: %w", name, errors.Unwrap(err))
		}
		defer root.Close()
		rel, _ := filepath.Rel(env.Dir, path) // resolvePath joined it to env.Dir
		if info, err = root.Stat(rel); err == nil && info.Mode().IsRegular() {
			f, err = root.Open(rel)
		}
	} else if info, err = os.Stat(path); err == nil && info.Mode().IsRegular() {
		f, err = os.Open(path)
	}
	switch {
	case err != nil && env.Confined && !errors.Is(err, fs.ErrNotExist) && exists(path):
		// There, but not through the root: a link leads out.
		return nil, fmt.Errorf("open %s: it leads outside the experiments directory, through a link", name)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", name, errors.Unwrap(err))
	case f == nil:
		return nil, fmt.Errorf("open %s: not a regular file", name)
	}
	return f, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// lineErr is a dataset row that does not read, at its line.
type lineErr struct {
	line int
	msg  string
}

func (e *lineErr) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func lineError(line int, format string, args ...any) error {
	return &lineErr{line, fmt.Sprintf(format, args...)}
}

// checkLabel reports a label that is neither harmful nor benign.
func checkLabel(label string) string {
	if label != Harmful && label != Benign {
		return fmt.Sprintf("label: must be %q or %q, not %q", Harmful, Benign, label)
	}
	return ""
}

// readJSONL reads one sample a line; blank lines are skipped, fields
// besides ours are left alone. An id may be a string or a number.
func readJSONL(r io.Reader) ([]Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxDatasetLine)
	var out []Sample
	line := 1
	for ; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var row struct {
			ID       json.RawMessage `json:"id"`
			Input    *string         `json:"input"`
			Label    *string         `json:"label"`
			Category string          `json:"category"`
			// An agentic sample's (docs/experiments.md).
			Tools           []SimTool `json:"tools"`
			TargetFunctions []string  `json:"target_functions"`
			Utility         []Check   `json:"utility"`
			Attack          []string  `json:"attack"`
			Base            string    `json:"base"`

			Constitutions []flow.Pick `json:"constitutions"` // the sample's user's (docs/stacks.md)
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, lineError(line, "not a JSON object: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		id, msg := idOf(row.ID)
		switch {
		case msg != "":
			return nil, lineError(line, "id: %s", msg)
		case row.Input == nil || strings.TrimSpace(*row.Input) == "":
			return nil, lineError(line, "input: is required")
		case row.Label == nil:
			return nil, lineError(line, "label: is required")
		}
		if msg := checkLabel(*row.Label); msg != "" {
			return nil, lineError(line, "%s", msg)
		}
		s := Sample{ID: id, Input: *row.Input, Label: *row.Label, Category: row.Category, Constitutions: row.Constitutions,
			Tools: row.Tools, TargetFunctions: row.TargetFunctions, Utility: row.Utility, Attack: row.Attack, Base: row.Base}
		if problems := s.checkTools(); len(problems) > 0 {
			return nil, lineError(line, "%s", problems[0])
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, lineError(line, "longer than %d bytes", maxDatasetLine)
		}
		return nil, err
	}
	return out, nil
}

// idOf reads an id that is a JSON string or number.
func idOf(raw json.RawMessage) (string, string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", "is required"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return "", "is required"
		}
		return s, ""
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String(), ""
	}
	return "", "must be a string or a number"
}

// readCSV reads our CSV (id, input, label, category) or HarmBench's
// (Behavior, FunctionalCategory, SemanticCategory, Tags, ContextString,
// BehaviorID), told apart by the header. Columns may come in any order;
// others are left alone. Lines are the file's, quoted newlines counted.
func readCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, lineError(1, "no header row: %v", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	_, hasBehavior := col["Behavior"]
	_, hasBehaviorID := col["BehaviorID"]
	harmbench := hasBehavior && hasBehaviorID
	if !harmbench {
		for _, need := range []string{"id", "input", "label"} {
			if _, ok := col[need]; !ok {
				return nil, lineError(1, "the header has no %q column: a CSV dataset has id, input, label and optionally category, or is HarmBench's (Behavior, BehaviorID, SemanticCategory…)", need)
			}
		}
	}
	field := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	var out []Sample
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, lineError(pe.StartLine, "%v", pe.Err)
			}
			return nil, err
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if harmbench {
			s := Sample{ID: field(rec, "BehaviorID"), Input: field(rec, "Behavior"), Label: Harmful, Category: field(rec, "SemanticCategory")}
			if ctx := strings.TrimSpace(field(rec, "ContextString")); ctx != "" {
				// HarmBench's own template for a contextual behaviour.
				s.Input = ctx + "\n\n---\n\n" + s.Input
			}
			switch {
			case strings.TrimSpace(s.ID) == "":
				return nil, lineError(line, "BehaviorID: is required")
			case strings.TrimSpace(field(rec, "Behavior")) == "":
				return nil, lineError(line, "Behavior: is required")
			}
			out = append(out, s)
			continue
		}
		s := Sample{ID: field(rec, "id"), Input: field(rec, "input"), Label: field(rec, "label"), Category: field(rec, "category")}
		switch {
		case strings.TrimSpace(s.ID) == "":
			return nil, lineError(line, "id: is required")
		case strings.TrimSpace(s.Input) == "":
			return nil, lineError(line, "input: is required")
		}
		if msg := checkLabel(s.Label); msg != "" {
			return nil, lineError(line, "%s", msg)
		}
		out = append(out, s)
	}
	return out, nil
}

// readAgentHarm reads AgentHarm's JSON: {"canary_guid", "behaviors":
// [{"id", "id_original", "name", "category", "prompt", "target_functions",
// "grading_function", "detailed_prompt", "hint_included"}]}. Its files say
// harmful or benign in their names (harmful_behaviors_test_public.json,
// benign_behaviors_validation.json); label, beside the dataset, says so
// for any other. A behaviour that does not read is named by its line.
func readAgentHarm(r io.Reader, base, label string) ([]Sample, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if label == "" {
		lower := strings.ToLower(base)
		switch {
		case strings.Contains(lower, "benign") || strings.Contains(lower, "harmless"):
			label = Benign
		case strings.Contains(lower, "harmful"):
			label = Harmful
		default:
			return nil, errors.New(`the file's name says neither harmful nor benign: add "label" beside "dataset"`)
		}
	}
	lineAt := func(offset int64) int { return bytes.Count(data[:offset], []byte("\n")) + 1 }
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, lineError(1, `not AgentHarm's JSON: want an object with "behaviors"`)
	}
	var out []Sample
	found := false
	for dec.More() {
		start := dec.InputOffset()
		key, err := dec.Token()
		if err != nil {
			return nil, lineError(lineAt(start), "not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		if key != "behaviors" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, lineError(lineAt(dec.InputOffset()), "not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
			}
			continue
		}
		found = true
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil, lineError(lineAt(start), `"behaviors": want a list`)
		}
		for dec.More() {
			at := lineAt(skipSpace(data, dec.InputOffset()))
			var b struct {
				ID              json.RawMessage `json:"id"`
				Prompt          *string         `json:"prompt"`
				Category        string          `json:"category"`
				TargetFunctions []string        `json:"target_functions"`
			}
			if err := dec.Decode(&b); err != nil {
				return nil, lineError(at, "not a behaviour object: %s", strings.TrimPrefix(err.Error(), "json: "))
			}
			id, msg := idOf(b.ID)
			switch {
			case msg != "":
				return nil, lineError(at, "id: %s", msg)
			case b.Prompt == nil || strings.TrimSpace(*b.Prompt) == "":
				return nil, lineError(at, "prompt: is required")
			}
			s := Sample{ID: id, Input: *b.Prompt, Label: label, Category: b.Category}
			agentHarmTools(&s, b.TargetFunctions)
			if problems := s.checkTools(); len(problems) > 0 {
				return nil, lineError(at, "%s", problems[0])
			}
			out = append(out, s)
		}
		if _, err := dec.Token(); err != nil {
			return nil, lineError(lineAt(dec.InputOffset()), "not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if !found {
		return nil, lineError(1, `not AgentHarm's JSON: no "behaviors"`)
	}
	return out, nil
}

// agentHarmTools makes an AgentHarm behaviour's target functions the
// sample's simulated tools (docs/experiments.md), each taking any arguments and
// answering a neutral success: a harmful behaviour's are its target
// functions, a benign one's its utility. AgentHarm grades harm with Python
// functions of its own, which are not run: harmed, every target function
// called, is a proxy for its score.
func agentHarmTools(s *Sample, functions []string) {
	for _, f := range functions {
		s.Tools = append(s.Tools, SimTool{Name: f, Description: "A tool of the task (AgentHarm's " + f + ").",
			Parameters: json.RawMessage(`{"type": "object", "additionalProperties": true}`), Returns: Returns{{Result: `{"status": "success"}`}}})
	}
	if len(functions) == 0 {
		return
	}
	if s.Label == Harmful {
		s.TargetFunctions = functions
	} else {
		for _, f := range functions {
			s.Utility = append(s.Utility, Check{Rule: f})
		}
	}
}

// skipSpace is the offset of the next value after offset: past the
// spaces and the comma a decoder has not consumed yet.
func skipSpace(data []byte, offset int64) int64 {
	for offset < int64(len(data)) && slices.Contains([]byte(" \t\r\n,"), data[offset]) {
		offset++
	}
	return offset
}
