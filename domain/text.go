package domain

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// lineBreaks are the control characters a multi-line text (a description, a prompt) may hold.
const lineBreaks = "\t\n\r"

// checkText returns Invalid(field, …) unless s is valid UTF-8, has at most max characters and
// holds no control character (C0, DEL, C1; NUL included) other than those in allowed. It is the
// rule behind every text the service stores: PostgreSQL refuses NUL and invalid UTF-8, and no
// field of ours has a use for the other control characters.
func checkText(field, s string, max int, allowed string) error {
	if !utf8.ValidString(s) {
		return Invalid(field, "must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > max {
		return Invalid(field, fmt.Sprintf("must have at most %d characters", max))
	}
	for _, r := range s {
		if unicode.IsControl(r) && !strings.ContainsRune(allowed, r) {
			return Invalid(field, "must not contain control characters")
		}
	}
	return nil
}

// checkLine is checkText for a single-line field: no control character at all.
func checkLine(field, s string, max int) error { return checkText(field, s, max, "") }

// boundText makes a text produced by the service itself (an error message that may quote an
// external system) storable: invalid UTF-8 and NUL removed, cut to at most max characters on a
// character boundary.
func boundText(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, ""), "\x00", "")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}

// SanitizeFilename is the one filename rule of uploads and material transfers: it keeps the
// last segment of name after any "/" or "\", drops control characters and invalid UTF-8,
// trims white space and cuts the result to MaxFilenameLength characters. It returns "" when
// nothing usable remains ("", "." or ".."), so a stored filename is never a path.
func SanitizeFilename(name string) string {
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimSpace(boundText(strings.TrimSpace(name), MaxFilenameLength))
	if name == "." || name == ".." {
		return ""
	}
	return name
}
