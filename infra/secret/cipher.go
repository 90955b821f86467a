package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/listingkit/listing/app/port"
)

// KeySize is the length of every key: AES-256.
const KeySize = 32

const (
	formatV1  = byte(1)
	nonceSize = 12
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Config configures New.
type Config struct {
	// Keys is CREDENTIALS_KEYS: comma-separated "id:base64key" pairs, current key first.
	// Each key decodes (standard or URL base64, padded or not) to 32 bytes; ids match
	// [A-Za-z0-9_.-]{1,64} and are unique. Default: empty, which generates an ephemeral
	// development key unless RequireKeys is set.
	Keys string
	// RequireKeys refuses an empty Keys instead of generating an ephemeral key. Set it in
	// production. Default false.
	RequireKeys bool
	// Logger receives the "generated ephemeral key" notice. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first problem with c without changing it. Messages name key ids and
// positions, never key material.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Keys) == "" {
		if c.RequireKeys {
			return errors.New("secret: CREDENTIALS_KEYS is required")
		}
		return nil
	}
	_, err := parseKeys(c.Keys)
	return err
}

type key struct {
	id   string
	aead cipher.AEAD
}

// Cipher is an AES-256-GCM port.CredentialCipher. Safe for concurrent use.
type Cipher struct {
	current *key
	byID    map[string]*key
}

var _ port.CredentialCipher = (*Cipher)(nil)

// New builds a Cipher from cfg.
func New(cfg Config) (*Cipher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("secret.New: %w", err)
	}
	var raw []rawKey
	if strings.TrimSpace(cfg.Keys) == "" {
		k := make([]byte, KeySize)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("secret.New: generate key: %w", err)
		}
		idb := make([]byte, 4)
		_, _ = rand.Read(idb)
		id := "ephemeral-" + hex.EncodeToString(idb)
		raw = []rawKey{{id: id, key: k}}
		cfg.Logger.Warn("generated ephemeral key",
			slog.String("component", "secret"), slog.String("key_id", id),
			slog.String("note", "CREDENTIALS_KEYS is unset; development only: sealed credentials will not open after a restart"))
	} else {
		var err error
		if raw, err = parseKeys(cfg.Keys); err != nil {
			return nil, fmt.Errorf("secret.New: %w", err)
		}
	}
	c := &Cipher{byID: make(map[string]*key, len(raw))}
	for i, rk := range raw {
		block, err := aes.NewCipher(rk.key)
		if err != nil {
			return nil, fmt.Errorf("secret.New: key %q: %w", rk.id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secret.New: key %q: %w", rk.id, err)
		}
		k := &key{id: rk.id, aead: aead}
		c.byID[rk.id] = k
		if i == 0 {
			c.current = k
		}
	}
	return c, nil
}

// CurrentKeyID returns the id of the key that seals new values.
func (c *Cipher) CurrentKeyID() string { return c.current.id }

// Seal encrypts plaintext under the current key, authenticating associatedData and the key id.
func (c *Cipher) Seal(plaintext, associatedData []byte) ([]byte, string, error) {
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, "", fmt.Errorf("secret.Seal: nonce: %w", err)
	}
	out := make([]byte, 0, 1+nonceSize+len(plaintext)+c.current.aead.Overhead())
	out = append(out, formatV1)
	out = append(out, nonce...)
	out = c.current.aead.Seal(out, nonce, plaintext, aad(c.current.id, associatedData))
	return out, c.current.id, nil
}

// Open decrypts sealed with the key keyID. It fails with port.ErrCredentialsKeyUnknown when
// keyID is not configured and port.ErrCredentialsUndecryptable when authentication fails.
func (c *Cipher) Open(sealed []byte, keyID string, associatedData []byte) ([]byte, error) {
	k, ok := c.byID[keyID]
	if !ok {
		return nil, fmt.Errorf("secret.Open: %w", port.ErrCredentialsKeyUnknown)
	}
	if len(sealed) < 1+nonceSize+k.aead.Overhead() || sealed[0] != formatV1 {
		return nil, fmt.Errorf("secret.Open: %w", port.ErrCredentialsUndecryptable)
	}
	nonce := sealed[1 : 1+nonceSize]
	pt, err := k.aead.Open(nil, nonce, sealed[1+nonceSize:], aad(keyID, associatedData))
	if err != nil {
		return nil, fmt.Errorf("secret.Open: %w", port.ErrCredentialsUndecryptable)
	}
	return pt, nil
}

// aad binds the format, the key id and the caller's associated data. Lengths are prefixed so
// that no two (keyID, ad) pairs share an encoding.
func aad(keyID string, ad []byte) []byte {
	return fmt.Appendf(nil, "listing-secret-v1|%d|%s|%d|%s", len(keyID), keyID, len(ad), ad)
}

type rawKey struct {
	id  string
	key []byte
}

func parseKeys(s string) ([]rawKey, error) {
	var out []rawKey
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, b64, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("CREDENTIALS_KEYS entry %d: want id:base64key", i+1)
		}
		id = strings.TrimSpace(id)
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("CREDENTIALS_KEYS entry %d: key id must match %s", i+1, keyIDPattern)
		}
		if seen[id] {
			return nil, fmt.Errorf("CREDENTIALS_KEYS entry %d: duplicate key id %q", i+1, id)
		}
		seen[id] = true
		k, err := decodeKey(strings.TrimSpace(b64))
		if err != nil {
			return nil, fmt.Errorf("CREDENTIALS_KEYS key %q: must be base64 of %d bytes", id, KeySize)
		}
		out = append(out, rawKey{id: id, key: k})
	}
	return out, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, errors.New("wrong length")
			}
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// GenerateKeysValue returns a fresh CREDENTIALS_KEYS value with one key named id, for
// operators ("app" can print one); it is a secret: do not log it.
func GenerateKeysValue(id string) (string, error) {
	if !keyIDPattern.MatchString(id) {
		return "", fmt.Errorf("secret.GenerateKeysValue: key id must match %s", keyIDPattern)
	}
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("secret.GenerateKeysValue: %w", err)
	}
	return id + ":" + base64.StdEncoding.EncodeToString(k), nil
}
