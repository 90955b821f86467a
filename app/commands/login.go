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
	Accounts port.Accounts
	Refresh  port.RefreshTokens
	Hasher   port.PasswordHasher
	Tokens   port.TokenIssuer
	Now      port.Clock
	// DummyHash is verified when the email is unknown, to even out the timing.
	DummyHash string
}

// Handle implements bus.Handler.
func (h LoginHandler) Handle(ctx context.Context, cmd Login) (Session, error) {
	email, err := domain.NormalizeEmail(cmd.Email)
	if err != nil {
		return Session{}, domain.ErrInvalidCredentials
	}
	user, err := h.Accounts.UserByEmail(ctx, email)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		if h.DummyHash != "" {
			_, _ = h.Hasher.Verify(cmd.Password, h.DummyHash)
		}
		return Session{}, domain.ErrInvalidCredentials
	case err != nil:
		return Session{}, err
	}
	ok, err := h.Hasher.Verify(cmd.Password, user.PasswordHash)
	if err != nil {
		return Session{}, fmt.Errorf("Login: %w", err)
	}
	if !ok {
		return Session{}, domain.ErrInvalidCredentials
	}
	return startSession(ctx, h.Refresh, h.Tokens, user, uuid.Nil, h.Now())
}
