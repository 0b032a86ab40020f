package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// What is judged is what runs. A call's arguments are decoded
// once, here, into one value: the rules read it, and its JSON, written
// anew from it, is what the judges, the record and the tool read. Readers
// of JSON disagree on what is not plain: a key given twice (the first
// wins, or the last), keys that differ only in case (Go's encoding/json
// fills a struct field from either), a number too large for a float.
// None of that survives here: such arguments are refused, and what is
// accepted is written back in the one form every reader reads alike.

// maxArgumentDepth bounds the nesting of a call's arguments: no tool's
// parameters go deeper, and the decoder recurses once a level.
const maxArgumentDepth = 64

// DecodeArguments decodes a call's arguments, as the model wrote them,
// into the value the rules read and the JSON every other reader gets. They
// must be a JSON object whose keys are unique even when case is ignored,
// at any depth, and that schema, the tool's parameters (nil: any object),
// accepts.
func DecodeArguments(raw []byte, schema map[string]any) (json.RawMessage, map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}") // some providers send nothing for a call that takes no arguments
	}
	d := &argDecoder{dec: json.NewDecoder(bytes.NewReader(raw))}
	d.dec.UseNumber() // each number is checked before it becomes a float64
	d.enc = json.NewEncoder(&d.out)
	d.enc.SetEscapeHTML(false) // "<" stays "<" for the judges to read
	v, err := d.value("", 0)
	if err == nil {
		if _, end := d.dec.Token(); end != io.EOF {
			err = errors.New("more follows the arguments object")
		}
	}
	if err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, fmt.Errorf("not valid JSON (%s)", strings.TrimPrefix(err.Error(), "json: "))
		}
		return nil, nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("the arguments are %s, not a JSON object", jsonKind(v))
	}
	if schema != nil {
		if err := conform(args, schema, ""); err != nil {
			return nil, nil, err
		}
	}
	return d.out.Bytes(), args, nil
}

// argDecoder reads one JSON value token by token, building the value and
// writing its JSON anew as it goes, in the model's order of keys.
type argDecoder struct {
	dec *json.Decoder
	out bytes.Buffer
	enc *json.Encoder // writes to out; for strings and numbers
}

func (d *argDecoder) value(at string, depth int) (any, error) {
	if depth > maxArgumentDepth {
		return nil, fmt.Errorf("the arguments nest deeper than %d levels", maxArgumentDepth)
	}
	tok, err := d.token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		return d.object(at, depth)
	case json.Delim('['):
		d.out.WriteByte('[')
		list := []any{}
		for i := 0; d.dec.More(); i++ {
			if i > 0 {
				d.out.WriteByte(',')
			}
			v, err := d.value(at+"["+strconv.Itoa(i)+"]", depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		if _, err := d.token(); err != nil {
			return nil, err
		}
		d.out.WriteByte(']')
		return list, nil
	}
	if n, ok := tok.(json.Number); ok {
		if tok, err = number(at, n); err != nil {
			return nil, err
		}
	}
	d.put(tok) // a string, a float64, a bool or nil
	return tok, nil
}

// exact is the largest magnitude up to which a float64 holds every whole
// number: past it, 2^53+1 would be read as 2^53.
const exact = 1 << 53

// number is n as a float64, the one form every reader reads alike. A
// number no float64 holds is refused, and so is one past 2^53 that a
// float64 would change (a 64-bit id, say): the tool would run with
// another value than the model wrote, and the judge would see that other.
func number(at string, n json.Number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0, fmt.Errorf("cannot unmarshal number %s into Go value of type float64", n)
	}
	if math.Abs(f) >= exact {
		// Past 2^53 a float64's exponent is at most 1023: 1100 bits hold
		// such a number's whole part exactly.
		x, _, err := big.ParseFloat(string(n), 10, 1100, big.ToNearestEven)
		if err != nil || x.Cmp(big.NewFloat(f)) != 0 {
			return 0, fmt.Errorf("%s is %s, a number past 2^53 that a float64 does not hold exactly; give it as a string", argName(at), n)
		}
	}
	return f, nil
}

func (d *argDecoder) object(at string, depth int) (any, error) {
	d.out.WriteByte('{')
	obj := map[string]any{}
	folded := map[string]string{} // a key with case folded → the key as given
	for i := 0; d.dec.More(); i++ {
		tok, err := d.token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // the decoder gives nothing else where a key goes
		fold := foldCase(key)
		switch first, seen := folded[fold]; {
		case seen && first == key:
			return nil, fmt.Errorf("%s is given twice", argName(join(at, key)))
		case seen:
			return nil, fmt.Errorf("%s and %s are the same key when case is ignored; give it once", argName(join(at, first)), argName(join(at, key)))
		}
		folded[fold] = key
		if i > 0 {
			d.out.WriteByte(',')
		}
		d.put(key)
		d.out.WriteByte(':')
		if obj[key], err = d.value(join(at, key), depth+1); err != nil {
			return nil, err
		}
	}
	if _, err := d.token(); err != nil {
		return nil, err
	}
	d.out.WriteByte('}')
	return obj, nil
}

// token is the next token; the input may not end before the value does.
func (d *argDecoder) token() (json.Token, error) {
	tok, err := d.dec.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	return tok, err
}

// put writes a string, a number, a bool or null as encoding/json does.
func (d *argDecoder) put(v any) {
	d.enc.Encode(v) // cannot fail: the decoder made v, a finite float if a number
	d.out.Truncate(d.out.Len() - 1)
}

// foldCase is s with each letter in one case, so that two keys are the
// same ignoring case, as strings.EqualFold and Go's encoding/json see it
// (K, k and the Kelvin sign alike), exactly when their foldCase is.
func foldCase(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

// join names a key inside the value at at, "" being the arguments.
func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// argName is how an error names the value at at.
func argName(at string) string {
	if at == "" {
		return "the arguments"
	}
	return strconv.Quote(at)
}

// jsonKind names the kind of a decoded JSON value.
func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		if v == math.Trunc(v) {
			return "an integer"
		}
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

// conform checks v, the value at at, against a JSON schema: the part of
// it that decides what a tool reads. It checks type (and OpenAPI's
// nullable), properties, required, additionalProperties and items, at any
// depth, and lets every other keyword pass: the tool checks the rest
// itself. A schema it cannot read (a $ref, a oneOf) constrains nothing
// here.
func conform(v any, schema any, at string) error {
	s, ok := schema.(map[string]any)
	if !ok {
		if schema == false {
			return fmt.Errorf("%s: the tool takes no value here", argName(at))
		}
		return nil
	}
	if want, ok := s["type"]; ok && !(v == nil && s["nullable"] == true) {
		types := strs(want)
		if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return isType(v, t) }) {
			return fmt.Errorf("%s must be of type %s, not %s", argName(at), strings.Join(types, " or "), jsonKind(v))
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		extra, patterns := s["additionalProperties"], s["patternProperties"] != nil
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if p, ok := props[k]; ok {
				if err := conform(v[k], p, join(at, k)); err != nil {
					return err
				}
				continue
			}
			if patterns {
				continue // a key a pattern may admit; not read here
			}
			if extra == false {
				return fmt.Errorf("%s is not a parameter of this tool (its parameters: %s)", argName(join(at, k)), strings.Join(slices.Sorted(maps.Keys(props)), ", "))
			}
			if err := conform(v[k], extra, join(at, k)); err != nil {
				return err
			}
		}
		for _, k := range strs(s["required"]) {
			if _, ok := v[k]; !ok {
				return fmt.Errorf("%s is required", argName(join(at, k)))
			}
		}
	case []any:
		if items, ok := s["items"]; ok {
			for i, x := range v {
				if err := conform(x, items, at+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// isType reports whether v, a decoded JSON value, is of the JSON schema
// type t; an unknown type name admits anything.
func isType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	}
	return true
}

// strs reads a schema's list of names, or its one name: a schema decoded
// from JSON has []any where one written in Go has []string.
func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []string:
		return v
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
