package flow_test

import (
	"encoding/json"
	"strings"
	"testing"

	"superego/flow"
)

// writeSchema is write_file's parameters, as the built-in tool declares
// them.
var writeSchema = map[string]any{"type": "object", "additionalProperties": false, "required": []string{"path", "content"},
	"properties": map[string]any{"path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}}}

// A call's arguments decode into one value, written back in one form that
// every reader reads alike, or are refused, saying why.
func TestDecodeArguments(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	cases := []struct {
		name, in string
		schema   map[string]any
		want     string // the JSON every reader gets, or the error
	}{
		{"written anew, in the model's order", `{ "path" : "a<b&c", "n": 1.50, "x": [true, null, -0, 1e2], "e": "\u0070\u00e9" }`, nil,
			`{"path":"a<b&c","n":1.5,"x":[true,null,-0,100],"e":"pé"}`},
		{"nothing is no arguments", " ", nil, `{}`},
		{"invalid UTF-8 is read as every Go reader reads it", "{\"a\": \"\xff\"}", nil, `{"a":"` + "\ufffd" + `"}`},
		{"a key given twice", `{"path": "a", "path": "b"}`, nil, `"path" is given twice`},
		{"a key given twice once escaped", `{"path": "a", "p\u0061th": "b"}`, nil, `"path" is given twice`},
		{"a key in two cases", `{"path": "notes/ok.txt", "PATH": ".env", "content": "x"}`, writeSchema, `"path" and "PATH" are the same key when case is ignored; give it once`},
		{"the Kelvin sign is a k", `{"k": 1, "` + "\u212a" + `": 2}`, nil, `"k" and "` + "\u212a" + `" are the same key when case is ignored; give it once`},
		{"deep inside", `{"a": [{"b": {"x": 1, "X": 2}}]}`, nil, `"a[0].b.x" and "a[0].b.X" are the same key when case is ignored; give it once`},
		{"an array", `["a"]`, nil, "the arguments are an array, not a JSON object"},
		{"a string", `"{\"path\": \"x\"}"`, nil, "the arguments are a string, not a JSON object"},
		{"not JSON", `{"path": "a"`, nil, "not valid JSON (unexpected EOF)"},
		{"two values", `{}{}`, nil, "more follows the arguments object"},
		{"a number no float holds", `{"n": 1e400}`, nil, "cannot unmarshal number 1e400"},
		{"a 64-bit id a float would round", `{"id": 12345678901234567890}`, nil, `"id" is 12345678901234567890, a number past 2^53 that a float64 does not hold exactly; give it as a string`},
		{"2^53 + 1", `{"a": [9007199254740993]}`, nil, `"a[0]" is 9007199254740993, a number past 2^53`},
		{"large numbers a float holds exactly", `{"a": 9007199254740992, "b": 1e20, "c": -18446744073709551616}`, nil, `{"a":9007199254740992,"b":100000000000000000000,"c":-18446744073709552000}`},
		{"too deep", deep, nil, "the arguments nest deeper than 64 levels"},

		{"the schema's arguments", `{"path": "notes/a", "content": ""}`, writeSchema, `{"path":"notes/a","content":""}`},
		{"a key the schema lacks", `{"PATH": ".env", "content": "x"}`, writeSchema, `"PATH" is not a parameter of this tool (its parameters: content, path)`},
		{"a required key missing", `{"path": "notes/a"}`, writeSchema, `"content" is required`},
		{"a wrapped value", `{"path": ["notes/a"], "content": "x"}`, writeSchema, `"path" must be of type string, not an array`},
		{"null where a string goes", `{"path": null, "content": "x"}`, writeSchema, `"path" must be of type string, not null`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, args, err := flow.DecodeArguments([]byte(c.in), c.schema)
			got := string(out)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			if err != nil {
				return
			}
			// The JSON decodes back into the value the rules read.
			var back map[string]any
			if json.Unmarshal(out, &back) != nil || !equalJSON(back, args) {
				t.Errorf("%s does not decode to %v", out, args)
			}
		})
	}
}

// What a tool's schema admits: types (an integer is a whole number;
// nullable admits null), items, additionalProperties as a schema, a
// schema of false; keywords not read here admit anything.
func TestArgumentsMeetTheSchema(t *testing.T) {
	t.Parallel()
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"n":    map[string]any{"type": "integer"},
		"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		"opt":  map[string]any{"type": "string", "nullable": true},
		"any":  map[string]any{"type": []any{"string", "number"}},
		"no":   false,
		"ref":  map[string]any{"$ref": "#/$defs/x"},
		"meta": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "boolean"}},
	}}
	for in, want := range map[string]string{
		`{"n": 3}`:                    "",
		`{"n": 3.0}`:                  "",
		`{"n": 3.5}`:                  `"n" must be of type integer, not a number`,
		`{"tags": ["a", "b"]}`:        "",
		`{"tags": ["a", 2]}`:          `"tags[1]" must be of type string, not an integer`,
		`{"opt": null}`:               "",
		`{"any": 1}`:                  "",
		`{"any": true}`:               `"any" must be of type string or number, not a boolean`,
		`{"no": 1}`:                   `"no": the tool takes no value here`,
		`{"ref": [1]}`:                "",
		`{"meta": {"a": true}}`:       "",
		`{"meta": {"a": "yes"}}`:      `"meta.a" must be of type boolean, not a string`,
		`{"other": {"X": 1, "x": 2}}`: `"other.X" and "other.x" are the same key when case is ignored`,
		`{"other": "extra keys are the schema's to allow"}`: "",
	} {
		_, _, err := flow.DecodeArguments([]byte(in), schema)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
