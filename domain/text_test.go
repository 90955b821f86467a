package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

func TestSanitizeFilename(t *testing.T) {
	long := strings.Repeat("é", MaxFilenameLength+10)
	cases := []struct{ in, want string }{
		{"photo.png", "photo.png"},
		{"  photo.png  ", "photo.png"},
		{"dir/photo.png", "photo.png"},
		{"/abs/dir/photo.png", "photo.png"},
		{`C:\Users\me\photo.png`, "photo.png"},
		{`..\..\photo.png`, "photo.png"},
		{"../../etc/passwd", "passwd"},
		{"..", ""},
		{".", ""},
		{"../", ""},
		{"a/..", ""},
		{"", ""},
		{"   ", ""},
		{"/", ""},
		{"pho\x00to.png", "photo.png"},
		{"pho\nto\r\t.png", "photo.png"},
		{"pho\x1b[2Jto.png", "pho[2Jto.png"},
		{"pho\u0085to.png", "photo.png"},
		{"pho\xffto.png", "photo.png"},
		{"..photo..png", "..photo..png"},
		{"ünïcødé 名前.png", "ünïcødé 名前.png"},
		{long, strings.Repeat("é", MaxFilenameLength)},
		{"dir/\x00..", ""},
	}
	for _, c := range cases {
		if got := SanitizeFilename(c.in); got != c.want {
			t.Errorf("SanitizeFilename(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestNewMediaFilename(t *testing.T) {
	now := time.Now()
	ok := map[string]string{"a.png": "a.png", "dir/a.png": "a.png", `..\a.png`: "a.png", strings.Repeat("x", MaxFilenameLength): strings.Repeat("x", MaxFilenameLength)}
	for in, want := range ok {
		m, err := NewMedia(uuid.New(), uuid.New(), in, "image/png", 10, 100, now)
		if err != nil || m.Filename != want {
			t.Errorf("NewMedia(%q) = %q, %v; want %q", in, m.Filename, err, want)
		}
	}
	for _, in := range []string{"", "..", "dir/", "a\x00.png", "a\n.png", "a\x1b.png", "a\xff.png", strings.Repeat("x", MaxFilenameLength+1)} {
		if _, err := NewMedia(uuid.New(), uuid.New(), in, "image/png", 10, 100, now); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("NewMedia(%q): err = %v, want VALIDATION_FAILED", in, err)
		}
	}
}

// TestTextRules: every text a client sends is refused when the database would refuse it (NUL,
// not UTF-8, over its limit) or when it holds a control character; multi-line fields accept
// line breaks.
func TestTextRules(t *testing.T) {
	now := time.Now()
	product := func(title, description string) error {
		_, err := ProductContent{Title: title, Description: description, Price: "1.00", Currency: "EUR"}.Validate()
		return err
	}
	ws := func(name string) error { _, err := ValidateWorkspaceName(name); return err }
	email := func(e string) error { _, err := NormalizeEmail(e); return err }
	store := func(shop, name string) error {
		_, err := NewStore(uuid.New(), uuid.New(), "sandbox", shop, name, []string{"sandbox"}, now)
		return err
	}
	prompt := func(p string) error {
		_, err := NewAITask(uuid.New(), uuid.New(), uuid.New(), AIKindText, Product{}, p, now)
		return err
	}
	refused := map[string]error{
		"title NUL":               product("a\x00b", ""),
		"title line feed":         product("a\nb", ""),
		"title not UTF-8":         product("a\xffb", ""),
		"title too long":          product(strings.Repeat("é", MaxTitleLength+1), ""),
		"description NUL":         product("t", "a\x00b"),
		"description escape":      product("t", "a\x1bb"),
		"description too long":    product("t", strings.Repeat("a", MaxDescriptionLength+1)),
		"workspace name NUL":      ws("a\x00b"),
		"workspace name too long": ws(strings.Repeat("a", MaxWorkspaceNameLength+1)),
		"email NUL":               email("a\x00b@example.com"),
		"email too long":          email(strings.Repeat("a", MaxEmailLength) + "@example.com"),
		"password NUL":            ValidatePassword("correct horse\x00battery"),
		"password too long":       ValidatePassword(strings.Repeat("a", MaxPasswordLength+1)),
		"shop id NUL":             store("a\x00b", "n"),
		"shop id too long":        store(strings.Repeat("a", MaxShopIDLength+1), "n"),
		"store name tab":          store("s", "a\tb"),
		"store name too long":     store("s", strings.Repeat("a", MaxStoreNameLength+1)),
		"prompt NUL":              prompt("a\x00b"),
		"prompt C1 control":       prompt("a\u009bb"),
		"prompt too long":         prompt(strings.Repeat("a", MaxPromptLength+1)),
	}
	for name, err := range refused {
		if !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: err = %v, want VALIDATION_FAILED", name, err)
		}
	}
	accepted := map[string]error{
		"title at its limit":       product(strings.Repeat("é", MaxTitleLength), ""),
		"description with breaks":  product("t", "line 1\r\nline 2\tend"),
		"prompt with breaks":       prompt("line 1\nline 2"),
		"workspace name unicode":   ws("Café 名前"),
		"password at its limit":    ValidatePassword(strings.Repeat("a", MaxPasswordLength)),
		"store name at its limit":  store("s", strings.Repeat("a", MaxStoreNameLength)),
		"prompt at its limit":      prompt(strings.Repeat("a", MaxPromptLength)),
		"workspace at its limit":   ws(strings.Repeat("a", MaxWorkspaceNameLength)),
		"email of a normal person": email("Ada@Example.com"),
	}
	for name, err := range accepted {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, u := range []string{"http://x/a\x00", "http://x/\x1b", "http://x/\xff", "http://x/" + strings.Repeat("a", MaxSourceURLLength)} {
		if err := ValidateSourceURL(u); !errors.Is(err, ErrSourceURLInvalid) {
			t.Errorf("ValidateSourceURL(%.40q): %v", u, err)
		}
	}
	if err := ValidateSourceURL("http://x/" + strings.Repeat("a", MaxSourceURLLength-len("http://x/"))); err != nil {
		t.Errorf("a source URL at its limit: %v", err)
	}
}

func TestFailMessagesAreStorable(t *testing.T) {
	var task Task
	if err := task.Fail("X", strings.Repeat("é", MaxTaskErrorLength)+"\x00\xff tail", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := task.ErrorMessage; got != strings.Repeat("é", MaxTaskErrorLength) {
		t.Errorf("task message: %d bytes", len(got))
	}
	op := Operation{Status: OperationRunning}
	if err := op.Fail("X", "a\x00b\xff"+strings.Repeat("é", MaxOperationErrorLength), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := op.ErrorMessage; !strings.HasPrefix(got, "ab") || len([]rune(got)) != MaxOperationErrorLength {
		t.Errorf("operation message: %q…", got[:10])
	}
}

// FuzzSanitizeFilename: whatever the input, the result is a storable single name: valid
// UTF-8, no separator or control character, not "." or "..", at most MaxFilenameLength
// characters, and sanitizing it again changes nothing.
func FuzzSanitizeFilename(f *testing.F) {
	for _, s := range []string{"a.png", "../../x", `C:\a\b.png`, "a\x00b", "\xff\xfe", " . ", "名前.png"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := SanitizeFilename(in)
		if !utf8.ValidString(out) || strings.ContainsAny(out, `/\`) || out == "." || out == ".." ||
			utf8.RuneCountInString(out) > MaxFilenameLength || out != strings.TrimSpace(out) {
			t.Fatalf("SanitizeFilename(%q) = %q", in, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) {
				t.Fatalf("SanitizeFilename(%q) = %q holds a control character", in, out)
			}
		}
		if again := SanitizeFilename(out); again != out {
			t.Fatalf("not idempotent: %q → %q → %q", in, out, again)
		}
	})
}
