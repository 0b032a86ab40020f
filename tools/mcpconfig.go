package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// MCPServer is one server of an mcp.json file, in the format Claude Code
// and Claude Desktop use: a program started with its arguments and
// environment (stdio), or a streamable-HTTP endpoint with headers.
type MCPServer struct {
	Name    string
	Command string
	Args    []string
	Env     map[string]string // added to the server's environment
	URL     string            // for "type": "http"
	Headers map[string]string // sent with every HTTP request
	// Secrets are the values ParseMCP expanded from a variable whose name
	// says it holds a secret (${GITHUB_TOKEN}), wherever they were used.
	Secrets []string
	// TrustAnnotations takes the server at its word when its tools' MCP
	// annotations say they are read-only or closed-world. Annotations are
	// the server's own claims, so by default every tool of a server
	// changes things and reaches outside.
	TrustAnnotations bool
}

// HTTP reports whether the server is reached over streamable HTTP rather
// than started as a program.
func (s MCPServer) HTTP() bool { return s.URL != "" }

// secretName reports whether a name says its value is a secret: an env
// key, a header or a variable named for a token, a key, a secret, a
// password, a credential, authorization or a cookie (GITHUB_TOKEN, API_KEY,
// PGPASSWORD, X-Api-Key, Authorization). The name is read word by word, so
// that GIT_AUTHOR_NAME or MONKEY_MODE are not.
func secretName(name string) bool {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, w := range words {
		switch {
		case w == "auth", w == "oauth", w == "key", w == "keys", strings.HasSuffix(w, "apikey"), strings.HasSuffix(w, "privatekey"):
			return true
		}
		for _, part := range []string{"token", "secret", "passw", "credential", "authoriz", "cookie"} {
			if strings.Contains(w, part) {
				return true
			}
		}
	}
	return false
}

// secrets are what the server is given that is secret: the values of its
// env and headers whose names say so, and what came from such a variable.
// They are kept out of errors and log lines. Other values (a name, a path,
// "production") are not secrets: redacting them would mangle every text
// that happens to hold them. A tool's result is never redacted: the model
// gets the answer as the tool gave it.
func (s MCPServer) secrets() []string {
	out := slices.Clone(s.Secrets)
	for _, m := range []map[string]string{s.Env, s.Headers} {
		for k, v := range m {
			if !secretName(k) {
				continue
			}
			out = append(out, v)
			// "Bearer TOKEN": the credential may be quoted without its scheme.
			if _, cred, ok := strings.Cut(v, " "); ok {
				out = append(out, strings.TrimSpace(cred))
			}
		}
	}
	// A value this short would be found in ordinary words.
	out = slices.DeleteFunc(out, func(v string) bool { return len(v) < 4 })
	// Longest first, so that a secret containing another is redacted whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// BuiltinServer is the server the built-in tools belong to, for supervisors
// that manage an agent's tools by server. No server of mcp.json may take
// its name.
const BuiltinServer = "builtin"

// mcpServerName is what a server's name may be: it becomes part of tool
// names (mcp__NAME__TOOL), which providers limit to these characters, and
// "__" would make them ambiguous.
var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$`)

// ParseMCP reads an mcp.json: {"mcpServers": {"NAME": {"command", "args",
// "env"} | {"type": "http", "url", "headers"}}}, each server with
// "trust_annotations" if its tools' annotations are to be believed. "${VAR}" and
// "${VAR:-default}" in strings are expanded with getenv, as Claude Code
// does. Every problem is an error naming the server, and a command that
// cannot be found is one: a configuration that cannot work stops the start
// rather than failing later.
func ParseMCP(data []byte, getenv func(string) string) ([]MCPServer, error) {
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := strictJSON(data, &file); err != nil {
		return nil, err
	}
	if file.Servers == nil {
		return nil, errors.New(`no "mcpServers" object`)
	}
	var out []MCPServer
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(file.Servers)) {
		s, err := parseMCPServer(name, file.Servers[name], getenv)
		if err != nil {
			problems = append(problems, fmt.Sprintf("mcpServers.%s: %v", name, err))
			continue
		}
		out = append(out, s)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

func parseMCPServer(name string, raw json.RawMessage, getenv func(string) string) (MCPServer, error) {
	var c struct {
		Type    string            `json:"type"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Trust   bool              `json:"trust_annotations"`
	}
	s := MCPServer{Name: name}
	switch {
	case name == BuiltinServer:
		return s, fmt.Errorf("the name %q is the built-in tools' own; rename the server", name)
	case !mcpServerName.MatchString(name):
		return s, errors.New(`a server's name may hold letters, digits, "-" and single "_", since it becomes part of its tools' names (mcp__NAME__TOOL)`)
	}
	if err := strictJSON(raw, &c); err != nil {
		return s, err
	}
	s.TrustAnnotations = c.Trust
	var missing []string
	expand := func(v string) string {
		return expandEnv(v, getenv, func(name string) { missing = append(missing, name) }, func(name, value string) {
			if secretName(name) {
				s.Secrets = append(s.Secrets, value)
			}
		})
	}
	switch c.Type {
	case "", "stdio":
		switch {
		case c.URL != "" || c.Headers != nil:
			return s, errors.New(`"url" and "headers" are for "type": "http"; a server with "command" is started as a program`)
		case c.Command == "":
			return s, errors.New(`needs "command" (a program to start), or "type": "http" with "url"`)
		}
		s.Command = expand(c.Command)
		for _, a := range c.Args {
			s.Args = append(s.Args, expand(a))
		}
		s.Env = map[string]string{}
		for k, v := range c.Env {
			s.Env[k] = expand(v)
		}
		if len(missing) == 0 {
			if _, err := exec.LookPath(s.Command); err != nil {
				return s, fmt.Errorf("command %q: not found, or not executable (PATH is searched for a bare name)", s.Command)
			}
		}
	case "http":
		switch {
		case c.Command != "" || c.Args != nil || c.Env != nil:
			return s, errors.New(`"command", "args" and "env" are for a program; "type": "http" takes "url" and "headers"`)
		case c.URL == "":
			return s, errors.New(`"type": "http" needs "url"`)
		}
		s.URL = expand(c.URL)
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("url %q: want an http:// or https:// URL", c.URL)
		}
		s.Headers = map[string]string{}
		for k, v := range c.Headers {
			s.Headers[k] = expand(v)
		}
	default:
		return s, fmt.Errorf(`type %q: want "stdio" (a program, the default) or "http" (streamable HTTP)`, c.Type)
	}
	if len(missing) > 0 {
		return s, fmt.Errorf("the environment has no %s, and no default is given (${%s:-default})", strings.Join(missing, ", "), missing[0])
	}
	return s, nil
}

// strictJSON decodes one JSON object into v, refusing fields v lacks, with
// the line of a syntax error.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil && dec.More():
		return errors.New("unexpected data after the JSON object")
	case err == nil:
		return nil
	case errors.As(err, &syn):
		return fmt.Errorf("line %d: malformed JSON: %v", 1+bytes.Count(data[:syn.Offset], []byte("\n")), syn)
	case errors.As(err, &typ):
		return fmt.Errorf("%q must be a JSON %s, not %s", typ.Field, typ.Type.Kind(), typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: the file ends inside the object")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} and ${VAR:-default}, telling expanded each
// variable's name and what took its place; a variable that is unset (or
// empty) and has no default is reported to missing.
func expandEnv(s string, getenv func(string) string, missing func(string), expanded func(name, value string)) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := envRef.FindStringSubmatch(ref)
		v := getenv(m[1])
		switch {
		case v == "" && m[2] != "":
			v = m[3]
		case v == "":
			missing(m[1])
			return ""
		}
		expanded(m[1], v)
		return v
	})
}
