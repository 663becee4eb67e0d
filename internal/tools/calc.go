package tools

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Calculator limits.
const (
	maxExprLen   = 500
	maxExprDepth = 100
)

// Evaluate computes an arithmetic expression with a recursive-descent parser
// over float64. Grammar (lowest precedence first):
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/" | "%") unary }
//	unary   = ("-" | "+") unary | power
//	power   = primary [ "^" unary ]          (right-associative; -2^2 = -4)
//	primary = number | constant | name "(" expr { "," expr } ")" | "(" expr ")"
//
// Constants: pi, e. Functions: sqrt abs round floor ceil min max log (base 10)
// ln exp sin cos tan (radians). Names are case-insensitive. Errors are *Error
// with a detail for the model: division by zero, a non-finite result, an unknown
// name, a syntax error, input over 500 characters or nesting deeper than 100.
// Nothing is ever executed: the input is only parsed as numbers and operators.
func Evaluate(expr string) (float64, error) {
	if n := utf8.RuneCountInString(expr); n > maxExprLen {
		return 0, Errorf("the expression is %d characters long; the limit is %d", n, maxExprLen)
	}
	if strings.TrimSpace(expr) == "" {
		return 0, Errorf("the expression is empty")
	}
	p := &parser{src: expr}
	v, err := p.expr()
	if err != nil {
		return 0, err
	}
	p.skipSpace()
	if p.pos < len(p.src) {
		return 0, p.unexpected()
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, Errorf("the result is not a finite number")
	}
	return v, nil
}

type parser struct {
	src   string
	pos   int
	depth int
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n' || p.src[p.pos] == '\r') {
		p.pos++
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) unexpected() error {
	if p.pos >= len(p.src) {
		return Errorf("the expression ends too early")
	}
	r := []rune(p.src[p.pos:])[0]
	return Errorf("unexpected %q at position %d", r, p.pos+1)
}

// enter guards recursion depth: every nesting construct (parenthesis, function
// call, sign, exponent) counts one level.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxExprDepth {
		return Errorf("the expression is nested more than %d levels deep", maxExprDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) expr() (float64, error) {
	v, err := p.term()
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '+':
			p.pos++
			w, err := p.term()
			if err != nil {
				return 0, err
			}
			v += w
		case '-':
			p.pos++
			w, err := p.term()
			if err != nil {
				return 0, err
			}
			v -= w
		default:
			return v, nil
		}
	}
}

func (p *parser) term() (float64, error) {
	v, err := p.unary()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peek()
		if op != '*' && op != '/' && op != '%' {
			return v, nil
		}
		p.pos++
		w, err := p.unary()
		if err != nil {
			return 0, err
		}
		switch op {
		case '*':
			v *= w
		case '/':
			if w == 0 {
				return 0, Errorf("division by zero")
			}
			v /= w
		case '%':
			if w == 0 {
				return 0, Errorf("modulo by zero")
			}
			v = math.Mod(v, w)
		}
	}
}

func (p *parser) unary() (float64, error) {
	c := p.peek()
	if c != '-' && c != '+' {
		return p.power()
	}
	p.pos++
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	v, err := p.unary()
	if c == '-' {
		v = -v
	}
	return v, err
}

func (p *parser) power() (float64, error) {
	base, err := p.primary()
	if err != nil {
		return 0, err
	}
	if p.peek() != '^' {
		return base, nil
	}
	p.pos++
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	exp, err := p.unary() // right-associative: 2^3^2 = 2^(3^2)
	if err != nil {
		return 0, err
	}
	v := math.Pow(base, exp)
	if math.IsNaN(v) {
		return 0, Errorf("%s^%s is not a real number", fmtNum(base), fmtNum(exp))
	}
	if math.IsInf(v, 0) {
		if base == 0 {
			return 0, Errorf("division by zero (0 to a negative power)")
		}
		return 0, Errorf("the result of %s^%s is too large", fmtNum(base), fmtNum(exp))
	}
	return v, nil
}

func (p *parser) primary() (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		p.pos++
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		v, err := p.expr()
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			if p.pos >= len(p.src) {
				return 0, Errorf("missing closing parenthesis")
			}
			return 0, p.unexpected()
		}
		p.pos++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		return p.number()
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
		return p.name()
	}
	return 0, p.unexpected()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) number() (float64, error) {
	start := p.pos
	for p.pos < len(p.src) && (isDigit(p.src[p.pos]) || p.src[p.pos] == '.') {
		p.pos++
	}
	// An exponent only when digits follow, so that "2e" is 2 then the name e.
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		i := p.pos + 1
		if i < len(p.src) && (p.src[i] == '+' || p.src[i] == '-') {
			i++
		}
		if i < len(p.src) && isDigit(p.src[i]) {
			for i < len(p.src) && isDigit(p.src[i]) {
				i++
			}
			p.pos = i
		}
	}
	text := p.src[start:p.pos]
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, Errorf("the number %s is too large", capText(text, 40))
		}
		return 0, Errorf("%q is not a number", capText(text, 40))
	}
	return v, nil
}

var constants = map[string]float64{"pi": math.Pi, "e": math.E}

type function struct {
	minArgs, maxArgs int // maxArgs -1: any number
	fn               func(args []float64) (float64, error)
}

func unary1(f func(float64) float64) function {
	return function{1, 1, func(a []float64) (float64, error) { return f(a[0]), nil }}
}

var functions = map[string]function{
	"sqrt": {1, 1, func(a []float64) (float64, error) {
		if a[0] < 0 {
			return 0, Errorf("sqrt of a negative number (%s)", fmtNum(a[0]))
		}
		return math.Sqrt(a[0]), nil
	}},
	"abs":   unary1(math.Abs),
	"round": unary1(math.Round),
	"floor": unary1(math.Floor),
	"ceil":  unary1(math.Ceil),
	"min": {1, -1, func(a []float64) (float64, error) {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Min(m, x)
		}
		return m, nil
	}},
	"max": {1, -1, func(a []float64) (float64, error) {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Max(m, x)
		}
		return m, nil
	}},
	"log": {1, 1, func(a []float64) (float64, error) {
		if a[0] <= 0 {
			return 0, Errorf("log of a number that is not positive (%s)", fmtNum(a[0]))
		}
		return math.Log10(a[0]), nil
	}},
	"ln": {1, 1, func(a []float64) (float64, error) {
		if a[0] <= 0 {
			return 0, Errorf("ln of a number that is not positive (%s)", fmtNum(a[0]))
		}
		return math.Log(a[0]), nil
	}},
	"exp": unary1(math.Exp),
	"sin": unary1(math.Sin),
	"cos": unary1(math.Cos),
	"tan": unary1(math.Tan),
}

const knownNames = "constants pi, e; functions sqrt, abs, round, floor, ceil, min, max, log, ln, exp, sin, cos, tan"

func (p *parser) name() (float64, error) {
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || isDigit(c)) {
			break
		}
		p.pos++
	}
	name := strings.ToLower(p.src[start:p.pos])
	if f, ok := functions[name]; ok {
		if p.peek() != '(' {
			return 0, Errorf("the function %s needs parentheses, as in %s(2)", name, name)
		}
		p.pos++
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		var args []float64
		if p.peek() != ')' {
			for {
				v, err := p.expr()
				if err != nil {
					return 0, err
				}
				args = append(args, v)
				if p.peek() != ',' {
					break
				}
				p.pos++
			}
		}
		if p.peek() != ')' {
			if p.pos >= len(p.src) {
				return 0, Errorf("missing closing parenthesis after the arguments of %s", name)
			}
			return 0, p.unexpected()
		}
		p.pos++
		if len(args) < f.minArgs || f.maxArgs >= 0 && len(args) > f.maxArgs {
			if f.maxArgs == 1 {
				return 0, Errorf("%s takes 1 argument, got %d", name, len(args))
			}
			return 0, Errorf("%s takes at least %d argument, got %d", name, f.minArgs, len(args))
		}
		v, err := f.fn(args)
		if err != nil {
			return 0, err
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, Errorf("%s(%s) is not a finite number", name, fmtNums(args))
		}
		return v, nil
	}
	if v, ok := constants[name]; ok {
		return v, nil
	}
	return 0, Errorf("unknown name %q; known are %s", capText(p.src[start:p.pos], 40), knownNames)
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func fmtNums(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmtNum(v)
	}
	return strings.Join(s, ", ")
}
