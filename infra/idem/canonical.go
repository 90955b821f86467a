package idem

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file holds the JSON normalizer behind request fingerprints. It parses a body into a
// small tree and writes that tree in one canonical form, so that two bodies with the same
// meaning give the same bytes:
//
//   - insignificant white space is dropped;
//   - object members are sorted by key;
//   - numbers are written as significant digits and a decimal exponent (1, 1.0, 1e0, 10e-1
//     and 0.1e1 are all "1e0"; -0 is 0); the value is compared exactly, never through a
//     float, so 9007199254740993 and 9007199254740992 stay different;
//   - strings are compared by their code points after escapes are resolved ("\u0041" is "A"),
//     without Unicode normalization.
//
// Anything doubtful makes the body non-canonicalizable, and the fingerprint then covers its
// exact bytes: that can only make two requests differ, never make two different requests
// equal. Doubtful means: not valid JSON, trailing data, invalid UTF-8, an object with the same
// key twice (decoders disagree on its meaning), nesting deeper than maxDepth, or an exponent
// too large to handle exactly.

// maxDepth bounds nesting of arrays and objects.
const maxDepth = 512

// maxExponentDigits bounds the significant digits of a number's exponent.
const maxExponentDigits = 15

type jkind uint8

const (
	jNull jkind = iota
	jFalse
	jTrue
	jNumber
	jString
	jArray
	jObject
)

// jvalue is one parsed JSON value.
type jvalue struct {
	kind jkind
	// str holds a string's code points; lone surrogates (from \uD800-style escapes without a
	// partner) are kept as their own values so that they stay distinct from U+FFFD.
	str []rune
	// num is a number's text as written.
	num     string
	elems   []jvalue
	members []jmember
}

type jmember struct {
	key   []rune
	value jvalue
}

var errNotCanonical = errors.New("idem: body is not canonicalizable JSON")

// canonicalJSON returns the canonical form of body, or ok=false when body is not
// canonicalizable JSON (see above). An empty or white-space-only body is the empty object.
func canonicalJSON(body []byte) (out []byte, ok bool) {
	v, err := parseJSON(body)
	if err != nil {
		return nil, false
	}
	var buf bytes.Buffer
	buf.Grow(len(body))
	if err := writeCanonical(&buf, v); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// parseJSON parses body into a tree, treating an empty or blank body as {}.
func parseJSON(body []byte) (jvalue, error) {
	if !utf8.Valid(body) {
		return jvalue{}, errNotCanonical
	}
	p := parser{data: body}
	p.skipSpace()
	if p.pos == len(p.data) {
		return jvalue{kind: jObject}, nil
	}
	v, err := p.value(0)
	if err != nil {
		return jvalue{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return jvalue{}, errNotCanonical
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (jvalue, error) {
	if depth > maxDepth {
		return jvalue{}, errNotCanonical
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		return jvalue{}, errNotCanonical
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.string()
		return jvalue{kind: jString, str: s}, err
	case c == '-' || (c >= '0' && c <= '9'):
		n, err := p.number()
		return jvalue{kind: jNumber, num: n}, err
	case p.literal("true"):
		return jvalue{kind: jTrue}, nil
	case p.literal("false"):
		return jvalue{kind: jFalse}, nil
	case p.literal("null"):
		return jvalue{kind: jNull}, nil
	}
	return jvalue{}, errNotCanonical
}

func (p *parser) literal(lit string) bool {
	if bytes.HasPrefix(p.data[p.pos:], []byte(lit)) {
		p.pos += len(lit)
		return true
	}
	return false
}

func (p *parser) object(depth int) (jvalue, error) {
	p.pos++ // {
	v := jvalue{kind: jObject}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return jvalue{}, errNotCanonical
		}
		k, err := p.string()
		if err != nil {
			return jvalue{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return jvalue{}, errNotCanonical
		}
		p.pos++
		val, err := p.value(depth + 1)
		if err != nil {
			return jvalue{}, err
		}
		v.members = append(v.members, jmember{key: k, value: val})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jvalue{}, errNotCanonical
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return v, nil
		default:
			return jvalue{}, errNotCanonical
		}
	}
}

func (p *parser) array(depth int) (jvalue, error) {
	p.pos++ // [
	v := jvalue{kind: jArray}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		val, err := p.value(depth + 1)
		if err != nil {
			return jvalue{}, err
		}
		v.elems = append(v.elems, val)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return jvalue{}, errNotCanonical
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return v, nil
		default:
			return jvalue{}, errNotCanonical
		}
	}
}

// string parses a JSON string at p.pos (which holds the opening quote).
func (p *parser) string() ([]rune, error) {
	p.pos++ // "
	// One allocation: the string's bytes bound its code points (to the next unescaped quote).
	n := 0
	for i := p.pos; i < len(p.data) && p.data[i] != '"'; i++ {
		if p.data[i] == '\\' {
			i++
		}
		n++
	}
	out := make([]rune, 0, n)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return out, nil
		case c < 0x20:
			return nil, errNotCanonical
		case c == '\\':
			if p.pos+1 >= len(p.data) {
				return nil, errNotCanonical
			}
			e := p.data[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, rune(e))
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, errNotCanonical
				}
				if r >= 0xD800 && r < 0xDC00 && p.pos+6 <= len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					if lo, ok := p.hex4(); ok && lo >= 0xDC00 && lo < 0xE000 {
						r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					} else {
						p.pos = save // a lone high surrogate; the next escape stands alone
					}
				}
				out = append(out, r)
			default:
				return nil, errNotCanonical
			}
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return nil, errNotCanonical
			}
			out = append(out, r)
			p.pos += size
		}
	}
	return nil, errNotCanonical
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// number scans a number following the JSON grammar and returns its text.
func (p *parser) number() (string, error) {
	start := p.pos
	d := p.data
	if p.pos < len(d) && d[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(d) && d[p.pos] == '0':
		p.pos++
	case p.pos < len(d) && d[p.pos] >= '1' && d[p.pos] <= '9':
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
	default:
		return "", errNotCanonical
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		n := p.pos
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == n {
			return "", errNotCanonical
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		n := p.pos
		for p.pos < len(d) && d[p.pos] >= '0' && d[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == n {
			return "", errNotCanonical
		}
	}
	return string(d[start:p.pos]), nil
}

// canonicalNumber returns the canonical spelling of a JSON number: "0", or an optional minus,
// the significant digits without leading or trailing zeros, "e" and the decimal exponent of
// the last digit (12.50 is "125e-1"). It fails when the exponent is too large to handle.
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, "0"
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	expNeg := strings.HasPrefix(exp, "-")
	exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	if len(exp) > maxExponentDigits {
		return "", errNotCanonical
	}
	e := int64(0)
	if exp != "" {
		v, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return "", errNotCanonical
		}
		e = v
	}
	if expNeg {
		e = -e
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return "0", nil
	}
	e -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	e += int64(len(digits) - len(trimmed))
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(trimmed)
	b.WriteByte('e')
	b.WriteString(strconv.FormatInt(e, 10))
	return b.String(), nil
}

// appendCanonicalString writes s quoted: '"' and '\' escaped, control characters and lone
// surrogates as \u00XX / \udXXX, everything else as raw UTF-8. The encoding is injective.
func appendCanonicalString(b []byte, s []rune) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20 || (r >= 0xD800 && r < 0xE000):
			b = append(b, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func writeCanonical(buf *bytes.Buffer, v jvalue) error {
	switch v.kind {
	case jNull:
		buf.WriteString("null")
	case jTrue:
		buf.WriteString("true")
	case jFalse:
		buf.WriteString("false")
	case jNumber:
		n, err := canonicalNumber(v.num)
		if err != nil {
			return err
		}
		buf.WriteString(n)
	case jString:
		buf.Write(appendCanonicalString(nil, v.str))
	case jArray:
		buf.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case jObject:
		type kv struct {
			key []byte
			val jvalue
		}
		ms := make([]kv, len(v.members))
		for i, m := range v.members {
			ms[i] = kv{key: appendCanonicalString(nil, m.key), val: m.value}
		}
		slices.SortFunc(ms, func(a, b kv) int { return bytes.Compare(a.key, b.key) })
		buf.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				if bytes.Equal(ms[i-1].key, m.key) {
					return errNotCanonical // the same key twice
				}
				buf.WriteByte(',')
			}
			buf.Write(m.key)
			buf.WriteByte(':')
			if err := writeCanonical(buf, m.val); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	}
	return nil
}
