package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"superego/flow"
)

// This file is constitution stacks over HTTP (docs/stacks.md): the library's
// routes, a request's "constitutions", and the stacks API keys bring.

// User is who an API key of SUPEREGO_API_KEYS_FILE is: a name for the
// record, and the stack of constitutions every request with the key
// brings, which a request may add to and raise, never lower.
type User struct {
	Name  string
	Stack []flow.StackEntry
}

// ReadUsers reads a keys file: {"KEY": {"user": "…", "constitutions":
// [{"name", "adherence"}]}, …}, each name one of lib's. A problem names
// the user, never the key.
func ReadUsers(r io.Reader, lib flow.Library) (map[string]User, error) {
	var file map[string]struct {
		User          string      `json:"user"`
		Constitutions []flow.Pick `json:"constitutions"`
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("not a JSON object of key → {\"user\", \"constitutions\"}: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	users := make(map[string]User, len(file))
	var problems []string
	for i, key := range slices.Sorted(maps.Keys(file)) {
		u := file[key]
		who := fmt.Sprintf("the key of user %q", u.User)
		if u.User == "" {
			who = fmt.Sprintf("key %d (in sorted order), which has no user", i+1)
		}
		if strings.TrimSpace(key) == "" || strings.ContainsAny(key, " \t\r\n") {
			problems = append(problems, who+": a key is a bearer token: not empty, no spaces")
		}
		stack, errs := lib.Resolve(u.Constitutions)
		for _, p := range errs {
			problems = append(problems, who+": constitutions"+p.String())
		}
		users[key] = User{Name: u.User, Stack: stack}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return users, nil
}

// stackFor is the stack a run starts with: the user's whose key the
// request carries, with the request's picks put on top. A bearer token
// that is no key the server knows is a 401 where keys bring stacks: a
// mistyped key must not quietly drop a user's stack. A pick that is not
// a library name, or whose level is out of range or below the key's, is a
// 400 at its field.
func (s *Server) stackFor(r *http.Request, picks []flow.Pick) ([]flow.StackEntry, error) {
	var base []flow.StackEntry
	if len(s.Users) > 0 {
		if token, ok := bearer(r); ok {
			u, known := s.user(token)
			if !known && !s.knownKey(token) {
				return nil, &Error{Status: http.StatusUnauthorized, Code: "invalid_api_key",
					Message: "the bearer token is none of the server's API keys (SUPEREGO_API_KEYS_FILE, SUPEREGO_API_KEYS)"}
			}
			base = u.Stack
		}
	}
	layers, problems := s.Engine.Exec.Library.Resolve(picks)
	if len(problems) > 0 {
		return nil, constitutionsError(problems)
	}
	stack, lowered := flow.Onto(base, layers)
	if lowered >= 0 {
		i := slices.IndexFunc(base, func(l flow.StackEntry) bool { return l.Name == layers[lowered].Name })
		return nil, constitutionsError([]flow.Problem{{Path: fmt.Sprintf("[%d].adherence", lowered),
			Message: fmt.Sprintf("your API key's stack holds %q at %d: a request may raise its level, never lower it", base[i].Name, base[i].Adherence)}})
	}
	return stack, nil
}

// constitutionsError is the 400 of a request's constitutions: a field
// error for each problem.
func constitutionsError(problems []flow.Problem) *Error {
	e := &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request"}
	for _, p := range problems {
		e.Fields = append(e.Fields, FieldError{"constitutions" + p.Path, p.Message})
	}
	return e
}

// user is the user whose key token is; it compares with every key, in
// constant time.
func (s *Server) user(token string) (User, bool) {
	var found User
	match := 0
	for key, u := range s.Users {
		if subtle.ConstantTimeCompare([]byte(token), []byte(key)) == 1 {
			found, match = u, 1
		}
	}
	return found, match == 1
}

// knownKey reports whether token is a key of SUPEREGO_API_KEYS or the
// admin token: keys that bring no stack, and are no mistake.
func (s *Server) knownKey(token string) bool {
	return oneOf(token, append(slices.Clip(s.APIKeys), s.AdminToken))
}

// picksOf reads GET /flow/execute's constitutions: "NAME[:LEVEL],…", as a
// web page's EventSource can send them.
func picksOf(q string) ([]flow.Pick, error) {
	picks, problems := flow.ParsePicks(q)
	if len(problems) > 0 {
		return nil, constitutionsError(problems)
	}
	return picks, nil
}

// constitutionInfo is a library constitution as GET /constitutions lists it.
type constitutionInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Chars       int    `json:"chars"`
}

// listConstitutions serves GET /constitutions: the library a stack's
// names come from.
func (s *Server) listConstitutions(w http.ResponseWriter, r *http.Request) error {
	out := []constitutionInfo{}
	lib := s.Engine.Exec.Library
	for _, name := range lib.Names() {
		text := lib[name]
		out = append(out, constitutionInfo{name, description(text), utf8.RuneCountInString(text)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getConstitution serves GET /constitutions/{name}: its text, as Markdown.
func (s *Server) getConstitution(w http.ResponseWriter, r *http.Request) error {
	name := chi.URLParam(r, "name")
	if !flow.ValidConstitutionName(name) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "invalid request",
			Fields: []FieldError{{"name", `must be 1 to 64 of a-z, 0-9, "_" and "-"`}}}
	}
	text, ok := s.Engine.Exec.Library[name]
	if !ok {
		return fmt.Errorf("constitution %q (GET /constitutions lists them): %w", name, flow.ErrNotFound)
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	io.WriteString(w, text)
	return nil
}

// description is a constitution's first heading, or its first line.
func description(text string) string {
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(strings.TrimLeft(line, "#")); line != "" {
			return line
		}
	}
	return ""
}
