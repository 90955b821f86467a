package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/httprate"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/clientkey"
)

// authLimits rate-limits the auth endpoints per client address (clientkey: the peer's
// address, forwarded headers not trusted, an IPv6 client as its /64), in this process's
// memory: one counter per client key seen in the last minute. Failed logins are held back by
// loginGuard, across processes.
type authLimits struct {
	address *httprate.RateLimiter
}

func newAuthLimits(perMinute int) *authLimits {
	onLimit := httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, domain.ErrRateLimited)
	})
	byPeer := httprate.WithKeyFuncs(func(r *http.Request) (string, error) { return clientkey.Of(r.RemoteAddr), nil })
	return &authLimits{address: httprate.NewRateLimiter(perMinute, time.Minute, byPeer, onLimit)}
}

func (l *authLimits) perAddress(next http.Handler) http.Handler { return l.address.Handler(next) }

// authMaxBodyBytes bounds the bodies of the auth endpoints (an email of 254 characters, a
// password of 256 and a workspace name of 200, every one escaped, fit several times): a
// larger body is refused before it is read.
const authMaxBodyBytes = 16 << 10

// readAuthBody is readBody with the auth endpoints' bound.
func (s *Server) readAuthBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return readBody(w, r, min(s.cfg.MaxBodyBytes, authMaxBodyBytes))
}

// hashSlot takes a password-hashing slot for a request that hashes a password (see
// Deps.HashSlots): known, a login from a client the account knows, may take a reserved one.
func (s *Server) hashSlot(ctx context.Context, known bool) (release func(), err error) {
	if s.deps.HashSlots == nil {
		return func() {}, nil
	}
	if known {
		return s.deps.HashSlots.Acquire(ctx)
	}
	return s.deps.HashSlots.AcquireShared(ctx)
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
	// DeviceToken is set by login only: sent back with a later login, it names the client
	// as one the account knows.
	DeviceToken string `json:"device_token,omitempty"`
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
	body, err := s.readAuthBody(w, r)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	release, err := s.hashSlot(r.Context(), false)
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
		Email       string `json:"email"`
		Password    string `json:"password"`
		DeviceToken string `json:"device_token"`
	}
	body, err := s.readAuthBody(w, r)
	if err == nil {
		err = decodeStrict(body, &in)
	}
	var device []byte
	if err == nil {
		device, err = parseDeviceToken(in.DeviceToken)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	// The email is validated (and so bounded) before the limiter sees it; one that is not an
	// address names no account: the answer of a wrong password, without a password check.
	email, err := domain.NormalizeEmail(in.Email)
	if err != nil {
		writeError(w, r, domain.ErrInvalidCredentials)
		return
	}
	// The steps' durations, logged at debug level: what a login waited on.
	steps := loginSteps{last: time.Now()}
	defer steps.log(r.Context(), s.log)
	attempt, retryAfter, err := s.logins.admit(r.Context(), email, clientkey.Of(r.RemoteAddr), device)
	steps.lap(&steps.limits)
	if err == nil && retryAfter > 0 {
		err = domain.ErrRateLimited.WithRetryAfter(retryAfter)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	steps.known = attempt.known
	release, err := s.hashSlot(r.Context(), attempt.known)
	steps.lap(&steps.slot)
	if err != nil {
		attempt.done(r.Context(), false)
		writeError(w, r, err)
		return
	}
	defer release()
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.Login, bus.Request[commands.Login]{
		Command: commands.Login{Email: email, Password: in.Password},
	})
	steps.lap(&steps.check)
	attempt.done(r.Context(), errors.Is(err, domain.ErrInvalidCredentials))
	if err != nil {
		steps.lap(&steps.record)
		writeError(w, r, err)
		return
	}
	out := sessionBody(reply.Result)
	// The session exists: the token is answered even when the device could not be
	// remembered (a later login that sends it is then from an unknown device, and gets a
	// new token when it succeeds).
	var rememberErr error
	out.DeviceToken, rememberErr = attempt.succeeded(r.Context(), in.DeviceToken)
	steps.lap(&steps.record)
	if rememberErr != nil {
		s.log.WarnContext(r.Context(), "login limits: remember a successful login", "request_id", requestID(r.Context()), "err", rememberErr)
	}
	writeJSON(w, http.StatusOK, out)
}

// loginSteps times the steps of one login: the limits (Known and Admit, and a turn's wait),
// the wait for a password-hashing slot, the password check (the Login command: the user's
// row, the hash, the session) and the records after it (Uncount, Remember).
type loginSteps struct {
	last                        time.Time
	known                       bool
	limits, slot, check, record time.Duration
}

// lap sets *d to the time since the previous lap (the first: since last was set).
func (s *loginSteps) lap(d *time.Duration) {
	now := time.Now()
	*d = now.Sub(s.last)
	s.last = now
}

func (s *loginSteps) log(ctx context.Context, log *slog.Logger) {
	log.DebugContext(ctx, "login steps", "request_id", requestID(ctx), "known", s.known,
		"limits", s.limits, "slot", s.slot, "check", s.check, "record", s.record)
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	var in struct {
		RefreshToken string `json:"refresh_token"`
	}
	body, err := s.readAuthBody(w, r)
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
