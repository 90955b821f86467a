package commands

import (
	"context"
	"fmt"

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
	return RegisterUser{UserID: domain.NewID(), WorkspaceID: domain.NewID(), Email: email, Password: password, WorkspaceName: workspaceName}
}

// RegisterUserResult is the new account, its workspace and a session.
type RegisterUserResult struct {
	Session
	Workspace domain.Workspace
}

// RegisterUserHandler handles RegisterUser.
type RegisterUserHandler struct {
	accounts port.Accounts
	refresh  port.RefreshTokens
	hasher   port.PasswordHasher
	tokens   port.TokenIssuer
	now      port.Clock
}

// NewRegisterUserHandler returns the handler. It panics on a nil dependency.
func NewRegisterUserHandler(accounts port.Accounts, refresh port.RefreshTokens, hasher port.PasswordHasher,
	tokens port.TokenIssuer, now port.Clock) RegisterUserHandler {
	mustHave("RegisterUserHandler", accounts, refresh, hasher, tokens, now)
	return RegisterUserHandler{accounts: accounts, refresh: refresh, hasher: hasher, tokens: tokens, now: now}
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
	hash, err := h.hasher.Hash(cmd.Password)
	if err != nil {
		return RegisterUserResult{}, fmt.Errorf("RegisterUser: %w", err)
	}
	now := h.now()
	user := domain.User{ID: cmd.UserID, Email: email, PasswordHash: hash, CreatedAt: now}
	if err := h.accounts.CreateUser(ctx, user); err != nil {
		return RegisterUserResult{}, err
	}
	ws := domain.Workspace{ID: cmd.WorkspaceID, Name: name, CreatedAt: now}
	if err := h.accounts.CreateWorkspace(ctx, ws, user.ID); err != nil {
		return RegisterUserResult{}, err
	}
	s, err := startSession(ctx, h.refresh, h.tokens, user, uuid.Nil, now)
	if err != nil {
		return RegisterUserResult{}, err
	}
	return RegisterUserResult{Session: s, Workspace: ws}, nil
}
