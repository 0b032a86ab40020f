package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Calculator limits: an expression is bounded in length and nesting, so
// every input returns fast.
const (
	maxExprLen   = 1000
	maxExprDepth = 64
)

// Calculator evaluates arithmetic: + - * / % ^ ** (right-associative),
// parentheses, unary minus, constants pi and e, and the functions in funcs.
func Calculator() Tool {
	return Tool{
		Name:        "calculator",
		ReadOnly:    true,
		ClosedWorld: true,
		Description: "Evaluate an arithmetic expression, such as 5*10, (2+3)^2, sqrt(2) or max(1, 7). Operators: + - * / % ^ **; functions: " + strings.Join(funcNames(), ", ") + "; constants: pi, e.",
		Parameters:  schema("expression", "the expression to evaluate"),
		Call: func(_ context.Context, args json.RawMessage) (string, error) {
			expr, err := stringArg(args, "expression")
			if err != nil {
				return "", err
			}
			v, err := Eval(expr)
			if err != nil {
				return "", err
			}
			return FormatNumber(v), nil
		},
	}
}

var funcs = map[string]func([]float64) (float64, error){
	"sqrt":  one(math.Sqrt),
	"abs":   one(math.Abs),
	"sin":   one(math.Sin),
	"cos":   one(math.Cos),
	"tan":   one(math.Tan),
	"asin":  one(math.Asin),
	"acos":  one(math.Acos),
	"atan":  one(math.Atan),
	"exp":   one(math.Exp),
	"ln":    one(math.Log),
	"log":   one(math.Log10),
	"log2":  one(math.Log2),
	"floor": one(math.Floor),
	"ceil":  one(math.Ceil),
	"round": one(math.Round),
	"pow": func(a []float64) (float64, error) {
		if len(a) != 2 {
			return 0, errors.New("pow takes 2 arguments")
		}
		return math.Pow(a[0], a[1]), nil
	},
	"min": func(a []float64) (float64, error) { return fold(a, math.Min) },
	"max": func(a []float64) (float64, error) { return fold(a, math.Max) },
}

func one(f func(float64) float64) func([]float64) (float64, error) {
	return func(a []float64) (float64, error) {
		if len(a) != 1 {
			return 0, errors.New("takes 1 argument")
		}
		return f(a[0]), nil
	}
}

func fold(a []float64, f func(x, y float64) float64) (float64, error) {
	if len(a) == 0 {
		return 0, errors.New("takes at least 1 argument")
	}
	v := a[0]
	for _, x := range a[1:] {
		v = f(v, x)
	}
	return v, nil
}

func funcNames() []string { return slices.Sorted(maps.Keys(funcs)) }

// Eval evaluates an arithmetic expression. It fails, never panics, on
// malformed input, and on results that are not finite numbers.
func Eval(expr string) (float64, error) {
	if len(expr) > maxExprLen {
		return 0, fmt.Errorf("expression is %d bytes; the limit is %d", len(expr), maxExprLen)
	}
	p := &calc{s: expr}
	v, err := p.sum()
	if err == nil && p.peek() != 0 {
		err = p.errorf("unexpected %q", p.peek())
	}
	if err != nil {
		return 0, err
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, errors.New("the result is not a finite number (too large, or undefined such as 0/0 or sqrt(-1))")
	}
	return v, nil
}

// FormatNumber prints integers without a fraction and other numbers to 15
// significant digits, as a calculator does: 0.1+0.2 is 0.3, not the
// binary approximation 0.30000000000000004.
func FormatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 15, 64)
}

type calc struct {
	s     string
	i     int
	depth int
}

func (p *calc) errorf(format string, a ...any) error {
	return fmt.Errorf("at position %d: %s", p.i+1, fmt.Sprintf(format, a...))
}

func (p *calc) peek() byte {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
	if p.i == len(p.s) {
		return 0
	}
	return p.s[p.i]
}

// enter bounds recursion: each nested parenthesis, unary sign and power
// goes one level deeper.
func (p *calc) enter() error {
	if p.depth++; p.depth > maxExprDepth {
		return p.errorf("nested more than %d levels deep", maxExprDepth)
	}
	return nil
}

func (p *calc) sum() (float64, error) {
	v, err := p.product()
	for err == nil {
		switch p.peek() {
		case '+':
			p.i++
			var w float64
			w, err = p.product()
			v += w
		case '-':
			p.i++
			var w float64
			w, err = p.product()
			v -= w
		default:
			return v, nil
		}
	}
	return 0, err
}

func (p *calc) product() (float64, error) {
	v, err := p.unary()
	for err == nil {
		c := p.peek()
		if c != '*' && c != '/' && c != '%' || strings.HasPrefix(p.s[p.i:], "**") {
			return v, nil
		}
		p.i++
		var w float64
		if w, err = p.unary(); err != nil {
			break
		}
		switch {
		case c == '*':
			v *= w
		case w == 0:
			return 0, errors.New("division by zero")
		case c == '/':
			v /= w
		default:
			v = math.Mod(v, w)
		}
	}
	return 0, err
}

func (p *calc) unary() (float64, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer func() { p.depth-- }()
	switch p.peek() {
	case '-':
		p.i++
		v, err := p.unary()
		return -v, err
	case '+':
		p.i++
		return p.unary()
	}
	return p.power()
}

func (p *calc) power() (float64, error) {
	base, err := p.atom()
	if err != nil {
		return 0, err
	}
	switch {
	case p.peek() == '^':
		p.i++
	case strings.HasPrefix(p.s[p.i:], "**"):
		p.i += 2
	default:
		return base, nil
	}
	exp, err := p.unary() // right-associative: 2^3^2 = 2^9
	if err != nil {
		return 0, err
	}
	v := math.Pow(base, exp)
	if math.IsInf(v, 0) && !math.IsInf(base, 0) {
		return 0, errors.New("the result is too large")
	}
	return v, nil
}

func (p *calc) atom() (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		if err := p.enter(); err != nil {
			return 0, err
		}
		p.i++
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, p.errorf("missing )")
		}
		p.i++
		p.depth--
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.i
		for p.i < len(p.s) && (isDigit(p.s[p.i]) || p.s[p.i] == '.') {
			p.i++
		}
		if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
			j := p.i + 1
			if j < len(p.s) && (p.s[j] == '+' || p.s[j] == '-') {
				j++
			}
			if j < len(p.s) && isDigit(p.s[j]) {
				for p.i = j; p.i < len(p.s) && isDigit(p.s[p.i]); p.i++ {
				}
			}
		}
		v, err := strconv.ParseFloat(p.s[start:p.i], 64)
		if err != nil {
			return 0, fmt.Errorf("at position %d: bad number %q", start+1, p.s[start:p.i])
		}
		return v, nil
	case isLetter(c):
		start := p.i
		for p.i < len(p.s) && (isLetter(p.s[p.i]) || isDigit(p.s[p.i])) {
			p.i++
		}
		name := strings.ToLower(p.s[start:p.i])
		switch name {
		case "pi":
			return math.Pi, nil
		case "e":
			return math.E, nil
		}
		f := funcs[name]
		if f == nil {
			return 0, fmt.Errorf("unknown name %q (functions: %s)", name, strings.Join(funcNames(), ", "))
		}
		args, err := p.args()
		if err != nil {
			return 0, err
		}
		v, err := f(args)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	case c == 0:
		return 0, p.errorf("expression ends too soon")
	}
	return 0, p.errorf("unexpected %q", c)
}

func (p *calc) args() ([]float64, error) {
	if p.peek() != '(' {
		return nil, p.errorf("a function needs its arguments in parentheses")
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.i++
	var args []float64
	for p.peek() != ')' {
		if len(args) > 0 {
			if p.peek() != ',' {
				return nil, p.errorf("expected , or )")
			}
			p.i++
		}
		v, err := p.sum()
		if err != nil {
			return nil, err
		}
		args = append(args, v)
	}
	p.i++
	p.depth--
	return args, nil
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
