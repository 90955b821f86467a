package commands

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/listingkit/listing/domain"
)

// Session is what a successful register, login or refresh returns: a short-lived access
// token and a refresh token that can be used exactly once.
type Session struct {
	User         domain.User
	AccessToken  string
	ExpiresIn    time.Duration
	RefreshToken string
}

// RefreshTTL is how long a refresh token lives.
const RefreshTTL = 30 * 24 * time.Hour

// newRefreshToken returns a 256-bit random token and the SHA-256 hash that is stored.
func newRefreshToken() (token string, hash []byte, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("refresh token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, HashRefreshToken(token), nil
}

// HashRefreshToken is the stored form of a refresh token. A plain hash is enough here: the
// token has 256 bits of entropy, so it cannot be guessed offline.
func HashRefreshToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}
