package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/httprate"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
)

// authLimits rate-limits the auth endpoints per client address (the peer's address:
// forwarded headers are not trusted). Failed logins are held back by loginGuard.
type authLimits struct {
	address *httprate.RateLimiter
}

func newAuthLimits(perMinute int) *authLimits {
	onLimit := httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, domain.ErrRateLimited)
	})
	byPeer := httprate.WithKeyFuncs(func(r *http.Request) (string, error) { return clientAddress(r), nil })
	return &authLimits{address: httprate.NewRateLimiter(perMinute, time.Minute, byPeer, onLimit)}
}

func (l *authLimits) perAddress(next http.Handler) http.Handler { return l.address.Handler(next) }

// hashSlot takes a password-hashing slot for a request that hashes a password (see
// Deps.HashSlots).
func (s *Server) hashSlot(ctx context.Context) (release func(), err error) {
	if s.deps.HashSlots == nil {
		return func() {}, nil
	}
	return s.deps.HashSlots.Acquire(ctx)
}

type userJSON struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	CreatedAt time.Time `json:"created_at"`
}

type workspaceJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

type sessionJSON struct {
	User         *userJSON      `json:"user,omitempty"`
	Workspace    *workspaceJSON `json:"workspace,omitempty"`
	AccessToken  string         `json:"access_token"`
	TokenType    string         `json:"token_type"`
	ExpiresIn    int            `json:"expires_in"`
	RefreshToken string         `json:"refresh_token"`
}

func sessionBody(s commands.Session) sessionJSON {
	out := sessionJSON{AccessToken: s.AccessToken, TokenType: "Bearer", ExpiresIn: int(s.ExpiresIn.Seconds()), RefreshToken: s.RefreshToken}
	if s.User.Email != "" {
		out.User = &userJSON{ID: s.User.ID.String(), Email: s.User.Email, CreatedAt: s.User.CreatedAt}
	}
	return out
}

func workspaceBody(ws domain.Workspace) *workspaceJSON {
	return &workspaceJSON{ID: ws.ID.String(), Name: ws.Name, CreatedAt: ws.CreatedAt}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Email         string `json:"email"`
		Password      string `json:"password"`
		WorkspaceName string `json:"workspace_name"`
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, err := s.hashSlot(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer release()
	cmd := commands.NewRegisterUser(in.Email, in.Password, in.WorkspaceName)
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.RegisterUser, bus.Request[commands.RegisterUser]{
		Command: cmd, Actor: bus.Actor{UserID: cmd.UserID, WorkspaceID: cmd.WorkspaceID},
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := sessionBody(reply.Result.Session)
	out.Workspace = workspaceBody(reply.Result.Workspace)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	addr := clientAddress(r)
	done, retryAfter, err := s.logins.admit(r.Context(), in.Email, addr)
	if err == nil && retryAfter > 0 {
		err = domain.ErrRateLimited.WithRetryAfter(retryAfter)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, err := s.hashSlot(r.Context())
	if err != nil {
		done(false)
		writeError(w, r, err)
		return
	}
	defer release()
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.Login, bus.Request[commands.Login]{
		Command: commands.Login{Email: in.Email, Password: in.Password},
	})
	done(errors.Is(err, domain.ErrInvalidCredentials))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionBody(reply.Result))
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	var in struct {
		RefreshToken string `json:"refresh_token"`
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.RefreshSession, bus.Request[commands.RefreshSession]{
		Command: commands.RefreshSession{RefreshToken: in.RefreshToken},
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	if reply.Result.Rejected != nil {
		writeError(w, r, reply.Result.Rejected)
		return
	}
	writeJSON(w, http.StatusOK, sessionBody(reply.Result.Session))
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	list, err := s.app.Queries.Workspaces(r.Context(), userID(r.Context()))
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]*workspaceJSON, 0, len(list))
	for _, ws := range list {
		items = append(items, workspaceBody(ws))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "next_cursor": nil})
}
