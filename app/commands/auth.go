package commands

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
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

// startSession issues an access token and a refresh token in family (a new family when
// family is uuid.Nil).
func startSession(ctx context.Context, refresh port.RefreshTokens, tokens port.TokenIssuer, user domain.User, family uuid.UUID, now time.Time) (Session, error) {
	var err error
	if family == uuid.Nil {
		if family, err = refresh.NewFamily(ctx, user.ID); err != nil {
			return Session{}, err
		}
	}
	token, hash, err := newRefreshToken()
	if err != nil {
		return Session{}, err
	}
	if err := refresh.Insert(ctx, hash, family, user.ID, now.Add(RefreshTTL)); err != nil {
		return Session{}, err
	}
	access, err := tokens.Issue(user.ID)
	if err != nil {
		return Session{}, fmt.Errorf("issue access token: %w", err)
	}
	return Session{User: user, AccessToken: access.Token, ExpiresIn: access.ExpiresIn, RefreshToken: token}, nil
}
