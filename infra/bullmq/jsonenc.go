package bullmq

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// appendMapJSON appends m as a JSON object, byte for byte what json.Marshal(m) writes (keys
// sorted), without its reflection.
func appendMapJSON(b []byte, m map[string]string) []byte {
	var buf [16]string
	keys := buf[:0]
	size := 2
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b = slices.Grow(b, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string: HTML characters, U+2028 and
// U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			if r == utf8.RuneError {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// parseMapJSON reads a JSON object of strings as appendMapJSON writes it (no escapes, no
// spaces) without reflection, and anything else with json.Unmarshal. nil when b is not an
// object of strings.
func parseMapJSON(b string) map[string]string {
	if m, ok := parsePlainMapJSON(b); ok {
		return m
	}
	var m map[string]string
	if json.Unmarshal([]byte(b), &m) != nil {
		return nil
	}
	return m
}

// parsePlainMapJSON reads {"k":"v",...} whose strings hold no backslash; ok is false for
// any other input (which json.Unmarshal may still read).
func parsePlainMapJSON(b string) (m map[string]string, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' || strings.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	m = make(map[string]string, strings.Count(b, `":"`))
	s := b[1 : len(b)-1]
	for s != "" {
		k, rest, ok := plainString(s)
		if !ok || rest == "" || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := plainString(rest[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		switch {
		case rest == "":
			s = ""
		case rest[0] == ',' && len(rest) > 1:
			s = rest[1:]
		default:
			return nil, false
		}
	}
	return m, true
}

// plainString reads a JSON string without escapes at the start of s: its contents and what
// follows it.
func plainString(s string) (v, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	v = s[1 : 1+end]
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 {
			return "", "", false
		}
	}
	if !utf8.ValidString(v) {
		return "", "", false
	}
	return v, s[2+end:], true
}
