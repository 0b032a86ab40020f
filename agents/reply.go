package agents

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// fields is the reply protocol (docs/flows.md): one JSON object with these keys.
// A stacked superego (docs/stacks.md) is asked for basis too.
type fields struct {
	Thinking      string `json:"thinking"`
	Decision      string `json:"decision"`
	AgentGuidance string `json:"agent_guidance"`
	Response      string `json:"response"`
	Basis         string `json:"basis"`
}

var (
	// protocolKey is a key of the protocol's object: quoted as JSON wants,
	// anywhere, or in single quotes or none after a brace or a comma.
	protocolKey = regexp.MustCompile(`"(thinking|decision|agent_guidance|response|basis)"\s*:|[{,]\s*'?(thinking|decision|agent_guidance|response|basis)'?\s*:`)
	// bareDecision is the decision of an object that does not parse, if it
	// reads as a decision word, quoted or not.
	bareDecision = regexp.MustCompile(`"decision"\s*:\s*(?:"([A-Za-z][A-Za-z0-9_]*)"|([A-Za-z][A-Za-z0-9_]*)\s*[,}\n])`)
	// bareGuidance is its agent_guidance, if that is a whole string.
	bareGuidance = regexp.MustCompile(`"agent_guidance"\s*:\s*("(?:[^"\\]|\\.)*")`)
)

// readReply reads a model's reply. The protocol's object gives its fields.
// A reply that tries to be that object but does not parse (cut off at the
// token limit, a comma missing or too many, single quotes, a bare word)
// gives no more than what a client was already streamed of it: its
// response as the streaming reader reads it, and a decision if one reads
// as a decision word. The whole text goes to thinking, hidden, for the
// research view. Prose is the model writing to the user: the response.
func readReply(text string) fields {
	if f, ok := parseReply(text); ok {
		return f
	}
	if !protocolKey.MatchString(text) {
		return fields{Response: strings.TrimSpace(text)}
	}
	var response strings.Builder
	stream := &responseStream{emit: func(s string) { response.WriteString(s) }}
	stream.Write([]byte(text))
	f := fields{Thinking: text, Response: response.String()}
	if m := bareDecision.FindStringSubmatch(text); m != nil {
		f.Decision = m[1] + m[2]
	}
	if m := bareGuidance.FindStringSubmatch(text); m != nil {
		json.Unmarshal([]byte(m[1]), &f.AgentGuidance) // hidden, whatever it reads as
	}
	return f
}

// maxObjectTries bounds the search for a JSON object in a reply that has
// text or fences around it, so a reply of many "{" costs little.
const maxObjectTries = 16

// parseReply finds the first JSON object in text that has any of the
// protocol's keys. ok is false when there is none; text around the object
// (a code fence, a preamble) is dropped.
func parseReply(text string) (f fields, ok bool) {
	rest := text
	for tries := 0; tries < maxObjectTries; tries++ {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			break
		}
		rest = rest[i:]
		if end := objectEnd(rest); end > 0 {
			if plain, ok := plainObject(rest[:end]); ok {
				return plain, true
			}
			// Escapes, or text that is not ASCII: every value a string.
			if f = (fields{}); json.Unmarshal([]byte(rest[:end]), &f) == nil && f != (fields{}) {
				return f, true
			}
			var obj struct {
				Thinking      json.RawMessage `json:"thinking"`
				Decision      json.RawMessage `json:"decision"`
				AgentGuidance json.RawMessage `json:"agent_guidance"`
				Response      json.RawMessage `json:"response"`
				Basis         json.RawMessage `json:"basis"`
			}
			if json.Unmarshal([]byte(rest[:end]), &obj) == nil &&
				(obj.Thinking != nil || obj.Decision != nil || obj.AgentGuidance != nil || obj.Response != nil || obj.Basis != nil) {
				return fields{str(obj.Thinking), str(obj.Decision), str(obj.AgentGuidance), str(obj.Response), str(obj.Basis)}, true
			}
		}
		rest = rest[1:]
	}
	return fields{}, false
}

// plainObject reads the object s, from its "{" to its "}", when it is of
// the kind models write: the protocol's keys, each with a string value in
// ASCII with no escapes. The fields are s's own memory, not copies. ok is
// false for anything else, which encoding/json then reads; where ok is
// true, encoding/json reads the same fields.
func plainObject(s string) (f fields, ok bool) {
	i := 1
	for {
		key, j, ok := plainString(s, skipSpace(s, i))
		if !ok {
			return fields{}, false
		}
		if i = skipSpace(s, j); s[i] != ':' {
			return fields{}, false
		}
		value, j, ok := plainString(s, skipSpace(s, i+1))
		if !ok {
			return fields{}, false
		}
		switch key {
		case "thinking":
			f.Thinking = value
		case "decision":
			f.Decision = value
		case "agent_guidance":
			f.AgentGuidance = value
		case "response":
			f.Response = value
		case "basis":
			f.Basis = value
		default:
			return fields{}, false
		}
		if i = skipSpace(s, j); s[i] != ',' {
			return f, i == len(s)-1 && s[i] == '}'
		}
		i++
	}
}

// plainString reads the string that starts at s[i], if it is ASCII with no
// escapes and no control characters, and returns it and the index after it.
func plainString(s string, i int) (string, int, bool) {
	if s[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", j, false
		}
	}
	return "", len(s), false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace; s ends with a bracket, so there is one.
func skipSpace(s string, i int) int {
	for s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' {
		i++
	}
	return i
}

// objectEnd returns the length of the JSON object s starts with, by its
// braces outside strings, or -1 if it does not close.
func objectEnd(s string) int {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// str reads a JSON value as text: a string as itself, anything else as its
// JSON (a model that answers "response": {"a": 1} still has its answer shown).
func str(raw json.RawMessage) string {
	if raw == nil {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// responseStream picks the value of the top-level "response" key out of a
// JSON reply as it streams in, and passes on its decoded text and nothing
// else: the "thinking" that comes before it is read past, never emitted.
type responseStream struct {
	emit func(string)

	started, done bool
	depth         int
	inString      bool
	escaped       bool
	capturingKey  bool
	expectKey     bool
	key           []byte
	keyIsResponse bool // the last key read was "response"
	afterColon    bool

	inResponse bool
	pending    []byte // an escape sequence not yet complete
	buf        []byte // decoded text not yet emitted
}

func (r *responseStream) Write(chunk []byte) {
	for _, b := range chunk {
		if r.done {
			break
		}
		r.byte(b)
	}
	r.flush()
}

func (r *responseStream) byte(b byte) {
	switch {
	case !r.started:
		if b == '{' {
			r.started, r.depth, r.expectKey = true, 1, true
		}
	case r.inResponse:
		r.responseByte(b)
	case r.inString:
		switch {
		case r.escaped:
			r.escaped = false
		case b == '\\':
			r.escaped = true
		case b == '"':
			r.inString = false
			if r.capturingKey {
				r.keyIsResponse, r.capturingKey = string(r.key) == "response", false
			}
			return
		}
		if r.capturingKey {
			r.key = append(r.key, b)
		}
	default:
		switch b {
		case '"':
			switch {
			case r.depth == 1 && r.expectKey:
				r.inString, r.capturingKey, r.key, r.expectKey = true, true, r.key[:0], false
			case r.depth == 1 && r.afterColon && r.keyIsResponse:
				r.inResponse = true
			default:
				r.inString = true
			}
		case ':':
			if r.depth == 1 {
				r.afterColon = true
			}
		case ',':
			if r.depth == 1 {
				r.expectKey, r.afterColon = true, false
			}
		case '{', '[':
			r.depth++
		case '}', ']':
			if r.depth--; r.depth == 0 {
				r.done = true
			}
		}
	}
}

// responseByte decodes one byte of the response string's JSON text.
func (r *responseStream) responseByte(b byte) {
	p := r.pending
	switch {
	case len(p) >= 6 && isHighSurrogate(p[:6]):
		// A high surrogate waits for its low half: "\ud83d\ude00" is one rune.
		if len(p) == 6 && b != '\\' || len(p) == 7 && b != 'u' {
			tail := append([]byte(nil), p[6:]...)
			r.pending = p[:6]
			r.decodePending() // a lone surrogate decodes to U+FFFD
			for _, c := range append(tail, b) {
				r.responseByte(c)
			}
			return
		}
		if r.pending = append(p, b); len(r.pending) == 12 {
			r.decodePending()
		}
	case len(p) > 0:
		r.pending = append(p, b)
		if len(r.pending) == 2 && b != 'u' || len(r.pending) == 6 && !isHighSurrogate(r.pending) {
			r.decodePending()
		}
	case b == '\\':
		r.pending = append(p, b)
	case b == '"':
		r.inResponse, r.done = false, true
	default:
		r.buf = append(r.buf, b)
	}
}

func (r *responseStream) decodePending() {
	var s string
	if json.Unmarshal([]byte(`"`+string(r.pending)+`"`), &s) == nil {
		r.buf = append(r.buf, s...)
	}
	r.pending = r.pending[:0]
}

func isHighSurrogate(p []byte) bool {
	return len(p) == 6 && p[1] == 'u' && (p[2] == 'd' || p[2] == 'D') && strings.ContainsRune("89abAB", rune(p[3]))
}

// flush emits the decoded text, keeping back an incomplete UTF-8 sequence.
func (r *responseStream) flush() {
	n := len(r.buf)
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		if utf8.RuneStart(r.buf[i]) {
			if !utf8.FullRune(r.buf[i:]) {
				n = i
			}
			break
		}
	}
	if n > 0 {
		r.emit(string(r.buf[:n]))
		r.buf = append(r.buf[:0], r.buf[n:]...)
	}
}
