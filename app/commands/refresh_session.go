package commands

import (
	"context"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// RefreshSession rotates a refresh token: the presented token is spent and a new one of the
// same family is returned. Presenting a spent token revokes the whole family (a stolen token
// was probably used by someone else).
type RefreshSession struct {
	RefreshToken string
}

// CommandName implements bus.Command.
func (RefreshSession) CommandName() string { return "RefreshSession" }

// String keeps the token out of any log that prints the command.
func (RefreshSession) String() string { return "RefreshSession{…}" }

// RefreshSessionResult is a new session, or Rejected with the reason when the token was not
// accepted. A rejection is a result, not an error, so that the family revocation commits.
type RefreshSessionResult struct {
	Session
	Rejected *domain.Error
}

// RefreshSessionHandler handles RefreshSession.
type RefreshSessionHandler struct {
	refresh port.RefreshTokens
	tokens  port.TokenIssuer
	now     port.Clock
}

// NewRefreshSessionHandler returns the handler. It panics on a nil dependency.
func NewRefreshSessionHandler(refresh port.RefreshTokens, tokens port.TokenIssuer, now port.Clock) RefreshSessionHandler {
	mustHave("RefreshSessionHandler", refresh, tokens, now)
	return RefreshSessionHandler{refresh: refresh, tokens: tokens, now: now}
}

// Handle implements bus.Handler.
func (h RefreshSessionHandler) Handle(ctx context.Context, cmd RefreshSession) (RefreshSessionResult, error) {
	if cmd.RefreshToken == "" || len(cmd.RefreshToken) > 128 {
		return RefreshSessionResult{Rejected: domain.ErrRefreshTokenInvalid}, nil
	}
	now := h.now()
	family, user, outcome, err := h.refresh.Use(ctx, HashRefreshToken(cmd.RefreshToken), now)
	if err != nil {
		return RefreshSessionResult{}, err
	}
	switch outcome {
	case port.RefreshReused:
		if err := h.refresh.RevokeFamily(ctx, family, "refresh token reused"); err != nil {
			return RefreshSessionResult{}, err
		}
		return RefreshSessionResult{Rejected: domain.ErrRefreshTokenReused}, nil
	case port.RefreshInvalid:
		return RefreshSessionResult{Rejected: domain.ErrRefreshTokenInvalid}, nil
	}
	s, err := startSession(ctx, h.refresh, h.tokens, domain.User{ID: user}, family, now)
	if err != nil {
		return RefreshSessionResult{}, err
	}
	return RefreshSessionResult{Session: s}, nil
}
