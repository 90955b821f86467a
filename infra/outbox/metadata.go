package outbox

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// parseMetadata reads a row's metadata, a JSON object of strings as PostgreSQL prints jsonb
// (`{"k": "v", ...}`), without reflection when its strings hold no escapes, else with
// json.Unmarshal. nil when it is not an object of strings.
func parseMetadata(b []byte) map[string]string {
	if m, ok := parsePlainMetadata(b); ok {
		return m
	}
	var m map[string]string
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// parsePlainMetadata reads {"k": "v", ...} whose strings hold no backslash; ok is false for
// anything else (which json.Unmarshal may still read).
func parsePlainMetadata(b []byte) (m map[string]string, ok bool) {
	if bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	s := skipSpace(b)
	if len(s) == 0 || s[0] != '{' {
		return nil, false
	}
	s = skipSpace(s[1:])
	m = make(map[string]string, bytes.Count(b, []byte{':'}))
	if len(s) > 0 && s[0] == '}' {
		return m, len(skipSpace(s[1:])) == 0
	}
	for {
		k, rest, ok := plainString(s)
		if !ok {
			return nil, false
		}
		rest = skipSpace(rest)
		if len(rest) == 0 || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := plainString(skipSpace(rest[1:]))
		if !ok {
			return nil, false
		}
		m[k] = v
		rest = skipSpace(rest)
		switch {
		case len(rest) > 0 && rest[0] == ',':
			s = skipSpace(rest[1:])
		case len(rest) > 0 && rest[0] == '}':
			return m, len(skipSpace(rest[1:])) == 0
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// plainString reads a JSON string without escapes at the start of b: its contents and what
// follows it.
func plainString(b []byte) (v string, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	end := bytes.IndexByte(b[1:], '"')
	if end < 0 {
		return "", nil, false
	}
	raw := b[1 : 1+end]
	for _, c := range raw {
		if c < 0x20 {
			return "", nil, false
		}
	}
	if !utf8.Valid(raw) {
		return "", nil, false
	}
	return string(raw), b[2+end:], true
}
