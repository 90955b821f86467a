package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type storeJSON struct {
	ID           string     `json:"id"`
	Platform     string     `json:"platform"`
	ShopID       string     `json:"shop_id"`
	Name         string     `json:"name"`
	Status       string     `json:"status"`
	StatusReason string     `json:"status_reason,omitempty"`
	ShopName     string     `json:"shop_name,omitempty"`
	VerifiedAt   *time.Time `json:"verified_at"`
	// States are the columns of the states flows declared of stores (domain.DeclareState),
	// each shown after verified_at: when the store entered the state, null unless in it.
	States             []stateJSON `json:"-"`
	CredentialsVersion int         `json:"credentials_version"`
	CreatedAt          time.Time   `json:"created_at"`
	UpdatedAt          time.Time   `json:"updated_at"`
	// RateLimit is the store's effective budget of requests to its marketplace; null when
	// none applies.
	RateLimit *rateLimitJSON `json:"rate_limit"`
}

// rateLimitJSON is a store's effective rate limit and where it comes from: "store" (its own,
// PUT …/rate-limit) or "platform" (STORE_RATE_LIMITS).
type rateLimitJSON struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	Source    string  `json:"source"`
}

// stateJSON is a declared state's column of a store (storeJSON.States).
type stateJSON struct {
	Name  string
	Since *time.Time
}

// MarshalJSON implements json.Marshaler: the store's members, with its States' after
// verified_at, in their order of declaration.
func (v storeJSON) MarshalJSON() ([]byte, error) {
	type members storeJSON
	b, err := json.Marshal(members(v))
	at := bytes.Index(b, []byte(`,"credentials_version":`))
	if err != nil || len(v.States) == 0 || at < 0 {
		return b, err
	}
	out := slices.Clone(b[:at])
	for _, st := range v.States {
		name, _ := json.Marshal(st.Name)
		since, err := json.Marshal(st.Since)
		if err != nil {
			return nil, err
		}
		out = append(append(append(append(out, ','), name...), ':'), since...)
	}
	return append(out, b[at:]...), nil
}

func (s *Server) storeBody(v domain.Store) storeJSON {
	out := storeJSON{ID: v.ID.String(), Platform: v.Platform, ShopID: v.ShopID, Name: v.Name, Status: string(v.Status),
		StatusReason: v.StatusReason, ShopName: v.ShopName, VerifiedAt: v.VerifiedAt, CredentialsVersion: v.CredentialsVersion,
		CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC()}
	for _, st := range domain.States("stores") {
		out.States = append(out.States, stateJSON{Name: st.Since, Since: v.Since(st)})
	}
	switch platform := s.cfg.StoreRateLimits[v.Platform]; {
	case !v.RateLimit.IsZero():
		out.RateLimit = &rateLimitJSON{PerSecond: v.RateLimit.PerSecond, Burst: v.RateLimit.Burst, Source: "store"}
	case !platform.IsZero():
		out.RateLimit = &rateLimitJSON{PerSecond: platform.PerSecond, Burst: platform.Burst, Source: "platform"}
	}
	return out
}

// rateLimitIn is PUT …/stores/{store_id}/rate-limit's body.
type rateLimitIn struct {
	PerSecond *float64 `json:"per_second"`
	Burst     *int     `json:"burst"`
}

// setStoreRateLimit: PUT /v1/workspaces/{ws}/stores/{store_id}/rate-limit {"per_second",
// "burst"}: the store's own budget; 200 with the store. No idempotency key: setting it
// again changes nothing.
func (s *Server) setStoreRateLimit(w http.ResponseWriter, r *http.Request) {
	var in rateLimitIn
	if _, ok := s.decode(w, r, &in); !ok {
		return
	}
	switch {
	case in.PerSecond == nil:
		writeError(w, r, domain.Invalid("per_second", "required"))
		return
	case in.Burst == nil:
		writeError(w, r, domain.Invalid("burst", "required"))
		return
	}
	limit := domain.RateLimit{PerSecond: *in.PerSecond, Burst: *in.Burst}
	if limit.IsZero() {
		writeError(w, r, domain.Invalid("per_second", "must be a positive number; DELETE returns the store to its platform's limit"))
		return
	}
	s.changeStoreRateLimit(w, r, limit)
}

// deleteStoreRateLimit: DELETE /v1/workspaces/{ws}/stores/{store_id}/rate-limit: the store
// returns to its platform's budget; 200 with the store.
func (s *Server) deleteStoreRateLimit(w http.ResponseWriter, r *http.Request) {
	s.changeStoreRateLimit(w, r, domain.RateLimit{})
}

func (s *Server) changeStoreRateLimit(w http.ResponseWriter, r *http.Request, limit domain.RateLimit) {
	id, err := pathID(r, "store_id", domain.ErrStoreNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.SetStoreRateLimit, bus.Request[commands.SetStoreRateLimit]{
		Command: commands.SetStoreRateLimit{StoreID: id, WorkspaceID: workspaceID(r.Context()), Limit: limit}, Actor: s.actor(r)})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"store": s.storeBody(reply.Result)})
}

// createStoreIn is listing.create_store's body.
type createStoreIn struct {
	Platform    string           `json:"platform"`
	ShopID      string           `json:"shop_id"`
	Name        string           `json:"name"`
	Credentials port.Credentials `json:"credentials"`
}

// createStoreCommand is listing.create_store: a store connected with its credentials, then verified.
func (s *Server) createStoreCommand() Command {
	return Command{Type: "listing.create_store",
		Run: Runs(s.app.Bus, s.app.Commands.CreateStore, func(_ context.Context, c Call, in createStoreIn) (commands.CreateStore, error) {
			return commands.CreateStore{StoreID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				Platform: in.Platform, ShopID: in.ShopID, Name: in.Name, Credentials: in.Credentials}, nil
		}, startRender(http.StatusCreated, "store", func(v domain.Store) any { return s.storeBody(v) }))}
}

func (s *Server) listStores(w http.ResponseWriter, r *http.Request) {
	getList[domain.Store](s, w, r, s.app.Queries.Stores, func(v domain.Store) any { return s.storeBody(v) })
}

func (s *Server) getStore(w http.ResponseWriter, r *http.Request) {
	getOne[domain.Store](s, w, r, "store_id", domain.ErrStoreNotFound, s.app.Queries.Stores, "store",
		func(v domain.Store) any { return s.storeBody(v) })
}

// storeParam is the store a command is about: the {store_id} of its path.
var storeParam = []Param{{"store_id", domain.ErrStoreNotFound}}

// replaceAuthorizationIn is listing.replace_store_authorization's body.
type replaceAuthorizationIn struct {
	Credentials port.Credentials `json:"credentials"`
}

// replaceStoreAuthorizationCommand is listing.replace_store_authorization: new credentials,
// verified again.
func (s *Server) replaceStoreAuthorizationCommand() Command {
	return Command{Type: "listing.replace_store_authorization", Params: storeParam,
		Run: Runs(s.app.Bus, s.app.Commands.ReplaceStoreAuthorization, func(_ context.Context, c Call, in replaceAuthorizationIn) (commands.ReplaceStoreAuthorization, error) {
			return commands.ReplaceStoreAuthorization{StoreID: c.IDs["store_id"], WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				Credentials: in.Credentials}, nil
		}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return s.storeBody(v) }))}
}

// verifyStoreCommand is listing.verify_store: the store's credentials verified again.
func (s *Server) verifyStoreCommand() Command {
	return Command{Type: "listing.verify_store", Params: storeParam,
		Run: Runs(s.app.Bus, s.app.Commands.VerifyStore, func(_ context.Context, c Call, _ struct{}) (commands.VerifyStore, error) {
			return commands.VerifyStore{StoreID: c.IDs["store_id"], WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID}, nil
		}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return s.storeBody(v) }))}
}

type verificationJSON struct {
	ID                 string            `json:"id"`
	StoreID            string            `json:"store_id"`
	CredentialsVersion int               `json:"credentials_version"`
	Status             string            `json:"status"`
	Valid              *bool             `json:"valid"`
	Error              *worker.ErrorJSON `json:"error"`
	CreatedAt          time.Time         `json:"created_at"`
	UpdatedAt          time.Time         `json:"updated_at"`
}

func verificationBody(v domain.StoreVerification) verificationJSON {
	return verificationJSON{ID: v.ID.String(), StoreID: v.StoreID.String(), CredentialsVersion: v.CredentialsVersion,
		Status: string(v.Status), Valid: v.Valid, Error: worker.TaskError(v.Task), CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC()}
}

func (s *Server) listStoreVerifications(w http.ResponseWriter, r *http.Request) {
	listUnder(s, w, r, "store_id", domain.ErrStoreNotFound, s.app.Queries.StoreVerifications,
		func(v domain.StoreVerification) any { return verificationBody(v) })
}
