package idem

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"mime"
	"net/http"
	"net/textproto"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/listingkit/listing/app/bus"
)

// MinSecretBytes is the shortest fingerprint secret accepted (256 bits).
const MinSecretBytes = 32

// fingerprintDomain separates these MACs from any other use of the same secret, and names the
// version of the message layout below.
const fingerprintDomain = "listingkit/idempotency-fingerprint/v1"

// Key is one fingerprint secret and the id stored beside every MAC made with it.
type Key struct {
	// ID names the secret in stored records: 1 to 64 characters of [A-Za-z0-9._-].
	ID string
	// Secret is the HMAC-SHA256 key, at least MinSecretBytes long. Never log it.
	Secret []byte
}

// String shows the id only, so that a Key printed by mistake leaks nothing.
func (k Key) String() string { return "idem.Key{ID:" + k.ID + ", Secret:<redacted>}" }

// GoString is String, for %#v.
func (k Key) GoString() string { return k.String() }

// ParseKeys parses FINGERPRINT_KEYS: "id1:base64secret,id2:base64secret". The first key is
// the current one (it makes new fingerprints); the others only verify records made before a
// rotation. Secrets are standard base64 (padded or not; URL-safe accepted too). Errors name the
// position and id of a bad entry, never a secret.
func ParseKeys(s string) ([]Key, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("idem.ParseKeys: no fingerprint keys configured")
	}
	var keys []Key
	for i, part := range strings.Split(s, ",") {
		id, enc, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("idem.ParseKeys: entry %d: want id:base64secret", i+1)
		}
		id = strings.TrimSpace(id)
		if !validKeyID(id) {
			return nil, fmt.Errorf("idem.ParseKeys: entry %d: key id must be 1-64 characters of [A-Za-z0-9._-]", i+1)
		}
		secret, err := decodeSecret(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("idem.ParseKeys: key %q: secret is not valid base64", id)
		}
		keys = append(keys, Key{ID: id, Secret: secret})
	}
	if err := validateKeys(keys); err != nil {
		return nil, fmt.Errorf("idem.ParseKeys: %w", err)
	}
	return keys, nil
}

func decodeSecret(enc string) ([]byte, error) {
	var lastErr error
	for _, e := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := e.DecodeString(enc)
		if err == nil {
			return b, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validateKeys(keys []Key) error {
	if len(keys) == 0 {
		return errors.New("no fingerprint keys configured")
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !validKeyID(k.ID) {
			return errors.New("a key id must be 1-64 characters of [A-Za-z0-9._-]")
		}
		if seen[k.ID] {
			return fmt.Errorf("key id %q appears twice", k.ID)
		}
		seen[k.ID] = true
		if len(k.Secret) < MinSecretBytes {
			return fmt.Errorf("key %q: secret shorter than %d bytes", k.ID, MinSecretBytes)
		}
	}
	return nil
}

// Fingerprint is a request fingerprint: an HMAC-SHA256 and the id of the key that made it.
type Fingerprint struct {
	KeyID string
	MAC   []byte
}

// Fingerprinter computes and verifies request fingerprints. It is safe for concurrent use.
type Fingerprinter struct {
	current *macKey
	byID    map[string]*macKey
}

// macKey is a Key with the HMAC states made with it, reused across requests (an HMAC-SHA256
// costs four allocations to set up, a fingerprint's message a few more).
type macKey struct {
	Key
	pool sync.Pool // of *macState
}

// macState is one HMAC of a key and a buffer for the message it authenticates.
type macState struct {
	h   hash.Hash
	msg []byte
}

func newMacKey(k Key) *macKey {
	mk := &macKey{Key: cloneKey(k)}
	mk.pool.New = func() any { return &macState{h: hmac.New(sha256.New, mk.Secret)} }
	return mk
}

// NewFingerprinter returns a Fingerprinter over keys; keys[0] is the current key.
func NewFingerprinter(keys []Key) (*Fingerprinter, error) {
	if err := validateKeys(keys); err != nil {
		return nil, fmt.Errorf("idem.NewFingerprinter: %w", err)
	}
	f := &Fingerprinter{byID: make(map[string]*macKey, len(keys))}
	for _, k := range keys {
		f.byID[k.ID] = newMacKey(k)
	}
	f.current = f.byID[keys[0].ID]
	return f, nil
}

func cloneKey(k Key) Key { return Key{ID: k.ID, Secret: slices.Clone(k.Secret)} }

// CurrentKeyID is the id of the key new fingerprints are made with.
func (f *Fingerprinter) CurrentKeyID() string { return f.current.ID }

// Fingerprint fingerprints a request with the current key.
func (f *Fingerprinter) Fingerprint(method, reqPath string, in bus.FingerprintInput) Fingerprint {
	return Fingerprint{KeyID: f.current.ID, MAC: f.current.mac(nil, method, reqPath, in)}
}

// ErrUnknownKeyID is returned by Verify when a record names a key that is no longer
// configured. Keep retired keys configured for at least the retention period.
var ErrUnknownKeyID = errors.New("idem: the record's fingerprint key is no longer configured")

// Verify reports whether the request has the fingerprint stored, using the key the record
// names (so records made before a rotation still verify). The MACs are compared in constant
// time. It returns ErrUnknownKeyID (wrapped, naming the id) when that key is not configured.
func (f *Fingerprinter) Verify(method, reqPath string, in bus.FingerprintInput, stored Fingerprint) (bool, error) {
	k, ok := f.byID[stored.KeyID]
	if !ok {
		return false, fmt.Errorf("idem.Fingerprinter.Verify: key id %q: %w", stored.KeyID, ErrUnknownKeyID)
	}
	var sum [sha256.Size]byte
	return hmac.Equal(k.mac(sum[:0], method, reqPath, in), stored.MAC), nil
}

// NormalizeMethod upper-cases an HTTP method.
func NormalizeMethod(m string) string { return strings.ToUpper(strings.TrimSpace(m)) }

// NormalizePath normalizes the actual request path (the decoded URL path, without query):
// it starts with "/", "." and ".." elements are resolved, repeated and trailing slashes are
// dropped. Case and percent-encoding are kept as given.
func NormalizePath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] == '/' {
		return path.Clean(p) // allocates only when it changes p
	}
	return path.Clean("/" + p)
}

// NormalizeContentType lowers the media type and the parameter names, lowers the charset
// value, and sorts the parameters. A value that does not parse is only trimmed.
func NormalizeContentType(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || isPlainMediaType(v) {
		return v
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return v
	}
	if cs, ok := params["charset"]; ok {
		params["charset"] = strings.ToLower(cs)
	}
	if s := mime.FormatMediaType(mt, params); s != "" {
		return s
	}
	return v
}

// isPlainMediaType reports whether v is a media type already in normal form: lower-case
// type and subtype tokens, no parameters (application/json); NormalizeContentType would
// return it unchanged.
func isPlainMediaType(v string) bool {
	slash := strings.IndexByte(v, '/')
	if slash <= 0 || slash == len(v)-1 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case i == slash:
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isJSONMediaType reports whether a normalized content type announces JSON. An absent content
// type counts as JSON: the service's idempotent endpoints take nothing else.
func isJSONMediaType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// normalizedHeaders returns the semantic headers as sorted (canonical name, value) pairs.
// Content-Type is normalized (NormalizeContentType); other values are trimmed of surrounding
// white space; empty values count as absent.
func normalizedHeaders(h map[string]string) [][2]string {
	out := make([][2]string, 0, len(h))
	for name, v := range h {
		name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
		if name == "Content-Type" {
			v = NormalizeContentType(v)
		} else {
			v = strings.TrimSpace(v)
		}
		if v == "" {
			continue
		}
		out = append(out, [2]string{name, v})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// mac appends to b the HMAC over a length-prefixed message: domain, method, normalized path,
// the semantic headers, the body's normal form tag ("json" or "raw") and the normalized body.
// Every part is length-prefixed, so no two different requests share a message. The message
// is built in one buffer and written once, with an HMAC state of k's pool.
func (k *macKey) mac(b []byte, method, reqPath string, in bus.FingerprintInput) []byte {
	st := k.pool.Get().(*macState)
	msg := appendFrame(st.msg[:0], fingerprintDomain)
	msg = appendFrame(msg, NormalizeMethod(method))
	msg = appendFrame(msg, NormalizePath(reqPath))
	headers := normalizedHeaders(in.Headers)
	msg = binary.AppendUvarint(msg, uint64(len(headers)))
	contentType := ""
	for _, h := range headers {
		msg = appendFrame(msg, h[0])
		msg = appendFrame(msg, h[1])
		if h[0] == "Content-Type" {
			contentType = h[1]
		}
	}
	kind, body := normalizeBody(contentType, in.Body)
	msg = appendFrame(msg, kind)
	msg = appendFrame(msg, body)
	st.h.Reset()
	st.h.Write(msg)
	b = st.h.Sum(b)
	if cap(msg) <= 64<<10 { // a large body's buffer is not kept
		st.msg = msg
	} else {
		st.msg = nil
	}
	k.pool.Put(st)
	return b
}

// normalizeBody returns the body's normal form: JSON bodies (by content type) in canonical
// form, tagged "json"; anything else, and JSON that is not canonicalizable, byte-exact, tagged
// "raw". An empty JSON body is the empty object {}.
func normalizeBody(contentType string, body []byte) (kind string, normalized []byte) {
	if isJSONMediaType(contentType) {
		if c, ok := canonicalJSON(body); ok {
			return "json", c
		}
	}
	return "raw", body
}

func appendFrame[T string | []byte](b []byte, part T) []byte {
	b = binary.AppendUvarint(b, uint64(len(part)))
	return append(b, part...)
}

// SemanticHeaders picks from request headers those that change a request's meaning and so
// belong in bus.FingerprintInput.Headers: Content-Type and If-Match (each only when present).
func SemanticHeaders(h http.Header) map[string]string {
	out := make(map[string]string, 2)
	for _, name := range []string{"Content-Type", "If-Match"} {
		if vs := h.Values(name); len(vs) > 0 {
			out[name] = strings.Join(vs, ", ")
		}
	}
	return out
}
