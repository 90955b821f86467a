// Package auth implements the account security ports: argon2id password hashing and signed,
// short-lived access tokens (JWT, HS256, with a key id so signing keys can be rotated); and
// HashSlots, the process-wide bound on password hashes computed at once.
package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Hasher implements port.PasswordHasher with argon2id.
type Hasher struct {
	Params *argon2id.Params
}

var _ port.PasswordHasher = Hasher{}

// DefaultHashParams follow RFC 9106's second recommendation scaled to a small server:
// 64 MiB, 1 pass, 2 lanes.
var DefaultHashParams = &argon2id.Params{Memory: 64 * 1024, Iterations: 1, Parallelism: 2, SaltLength: 16, KeyLength: 32}

// FastHashParams are for tests only: cheap, and never to be used for real passwords.
var FastHashParams = &argon2id.Params{Memory: 1024, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}

// Hash implements port.PasswordHasher.
func (h Hasher) Hash(password string) (string, error) {
	p := h.Params
	if p == nil {
		p = DefaultHashParams
	}
	s, err := argon2id.CreateHash(password, p)
	if err != nil {
		return "", fmt.Errorf("auth.Hash: %w", err)
	}
	return s, nil
}

// Verify implements port.PasswordHasher.
func (Hasher) Verify(password, hash string) (bool, error) {
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	if err != nil {
		return false, fmt.Errorf("auth.Verify: malformed hash")
	}
	return ok, nil
}

// Key is a named signing secret.
type Key struct {
	ID     string
	Secret []byte
}

// ParseKeys reads "id1:base64secret,id2:base64secret" (standard or URL base64). The first
// key is the current one; the others are still accepted, so a key can be rotated. Each
// secret must have at least 32 bytes. Errors never quote the secrets.
func ParseKeys(spec string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		id, enc, ok := strings.Cut(part, ":")
		if !ok || id == "" || enc == "" {
			return nil, fmt.Errorf("key %d: want id:base64secret", i+1)
		}
		secret, err := decodeBase64(enc)
		if err != nil {
			return nil, fmt.Errorf("key %q: secret is not base64", id)
		}
		if len(secret) < 32 {
			return nil, fmt.Errorf("key %q: secret must have at least 32 bytes", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("key %q: duplicate id", id)
		}
		seen[id] = true
		keys = append(keys, Key{ID: id, Secret: secret})
	}
	return keys, nil
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// RandomKey returns a fresh 32-byte key with the given id (development defaults).
func RandomKey(id string) Key {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return Key{ID: id, Secret: b}
}

// Tokens implements port.TokenIssuer with HS256 JWTs.
type Tokens struct {
	keys   []Key
	ttl    time.Duration
	issuer string
	now    func() time.Time
}

var _ port.TokenIssuer = (*Tokens)(nil)

// NewTokens returns an issuer signing with keys[0] and accepting any of keys. ttl defaults
// to 15 minutes.
func NewTokens(keys []Key, ttl time.Duration, now func() time.Time) (*Tokens, error) {
	if len(keys) == 0 {
		return nil, errors.New("auth.NewTokens: no signing key")
	}
	if ttl <= 0 {
		ttl = 15 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &Tokens{keys: keys, ttl: ttl, issuer: "listing", now: now}, nil
}

// Issue implements port.TokenIssuer.
func (t *Tokens) Issue(userID uuid.UUID) (port.AccessToken, error) {
	now := t.now()
	claims := jwt.RegisteredClaims{
		Issuer:    t.issuer,
		Subject:   userID.String(),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(t.ttl)),
		ID:        uuid.NewString(),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = t.keys[0].ID
	s, err := tok.SignedString(t.keys[0].Secret)
	if err != nil {
		return port.AccessToken{}, fmt.Errorf("auth.Issue: %w", err)
	}
	return port.AccessToken{Token: s, ExpiresIn: t.ttl}, nil
}

// Verify implements port.TokenIssuer.
func (t *Tokens) Verify(token string) (uuid.UUID, error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		for _, k := range t.keys {
			if k.ID == kid {
				return k.Secret, nil
			}
		}
		return nil, errors.New("unknown key id")
	}, jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(t.issuer), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(t.now))
	if err != nil {
		return uuid.Nil, domain.ErrUnauthenticated
	}
	id, err := uuid.Parse(claims.Subject)
	if err != nil {
		return uuid.Nil, domain.ErrUnauthenticated
	}
	return id, nil
}
