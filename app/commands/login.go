package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Login checks an email and password and starts a session in a new refresh-token family.
type Login struct {
	Email    string
	Password string
}

// CommandName implements bus.Command.
func (Login) CommandName() string { return "Login" }

// String keeps the password out of any log that prints the command.
func (c Login) String() string { return "Login{" + c.Email + "}" }

// LoginHandler handles Login. Unknown email and wrong password take the same time and give
// the same error, so the endpoint does not reveal which accounts exist.
type LoginHandler struct {
	accounts  port.Accounts
	refresh   port.RefreshTokens
	hasher    port.PasswordHasher
	tokens    port.TokenIssuer
	now       port.Clock
	dummyHash string
}

// NewLoginHandler returns the handler. dummyHash, a hash made by hasher, is verified when
// the email is unknown, to even out the timing. It panics on a nil dependency.
func NewLoginHandler(accounts port.Accounts, refresh port.RefreshTokens, hasher port.PasswordHasher,
	tokens port.TokenIssuer, now port.Clock, dummyHash string) LoginHandler {
	mustHave("LoginHandler", accounts, refresh, hasher, tokens, now)
	return LoginHandler{accounts: accounts, refresh: refresh, hasher: hasher, tokens: tokens, now: now, dummyHash: dummyHash}
}

// Handle implements bus.Handler.
func (h LoginHandler) Handle(ctx context.Context, cmd Login) (Session, error) {
	email, err := domain.NormalizeEmail(cmd.Email)
	if err != nil {
		return Session{}, domain.ErrInvalidCredentials
	}
	user, err := h.accounts.UserByEmail(ctx, email)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		if h.dummyHash != "" {
			_, _ = h.hasher.Verify(cmd.Password, h.dummyHash)
		}
		return Session{}, domain.ErrInvalidCredentials
	case err != nil:
		return Session{}, err
	}
	ok, err := h.hasher.Verify(cmd.Password, user.PasswordHash)
	if err != nil {
		return Session{}, fmt.Errorf("Login: %w", err)
	}
	if !ok {
		return Session{}, domain.ErrInvalidCredentials
	}
	return startSession(ctx, h.refresh, h.tokens, user, uuid.Nil, h.now())
}
