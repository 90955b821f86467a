package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// RegisterUser creates an account, its first workspace (owned by it) and a session.
// The bus actor must carry the new WorkspaceID and UserID (see NewRegisterUser), so the
// transaction's RLS scope allows writing the workspace.
type RegisterUser struct {
	UserID        uuid.UUID
	WorkspaceID   uuid.UUID
	Email         string
	Password      string
	WorkspaceName string
}

// CommandName implements bus.Command.
func (RegisterUser) CommandName() string { return "RegisterUser" }

// String keeps the password out of any log that prints the command.
func (c RegisterUser) String() string { return "RegisterUser{" + c.Email + "}" }

// NewRegisterUser returns the command with fresh ids.
func NewRegisterUser(email, password, workspaceName string) RegisterUser {
	return RegisterUser{UserID: uuid.New(), WorkspaceID: uuid.New(), Email: email, Password: password, WorkspaceName: workspaceName}
}

// RegisterUserResult is the new account, its workspace and a session.
type RegisterUserResult struct {
	Session
	Workspace domain.Workspace
}

// RegisterUserHandler handles RegisterUser.
type RegisterUserHandler struct {
	Accounts port.Accounts
	Refresh  port.RefreshTokens
	Hasher   port.PasswordHasher
	Tokens   port.TokenIssuer
	Now      port.Clock
}

// Handle implements bus.Handler.
func (h RegisterUserHandler) Handle(ctx context.Context, cmd RegisterUser) (RegisterUserResult, error) {
	email, err := domain.NormalizeEmail(cmd.Email)
	if err != nil {
		return RegisterUserResult{}, err
	}
	if err := domain.ValidatePassword(cmd.Password); err != nil {
		return RegisterUserResult{}, err
	}
	name, err := domain.ValidateWorkspaceName(cmd.WorkspaceName)
	if err != nil {
		return RegisterUserResult{}, err
	}
	hash, err := h.Hasher.Hash(cmd.Password)
	if err != nil {
		return RegisterUserResult{}, fmt.Errorf("RegisterUser: %w", err)
	}
	now := h.Now()
	user := domain.User{ID: cmd.UserID, Email: email, PasswordHash: hash, CreatedAt: now}
	if err := h.Accounts.CreateUser(ctx, user); err != nil {
		return RegisterUserResult{}, err
	}
	ws := domain.Workspace{ID: cmd.WorkspaceID, Name: name, CreatedAt: now}
	if err := h.Accounts.CreateWorkspace(ctx, ws, user.ID); err != nil {
		return RegisterUserResult{}, err
	}
	s, err := startSession(ctx, h.Refresh, h.Tokens, user, uuid.Nil, now)
	if err != nil {
		return RegisterUserResult{}, err
	}
	return RegisterUserResult{Session: s, Workspace: ws}, nil
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
