package httpapi

import (
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type storeJSON struct {
	ID                 string     `json:"id"`
	Platform           string     `json:"platform"`
	ShopID             string     `json:"shop_id"`
	Name               string     `json:"name"`
	Status             string     `json:"status"`
	StatusReason       string     `json:"status_reason,omitempty"`
	ShopName           string     `json:"shop_name,omitempty"`
	VerifiedAt         *time.Time `json:"verified_at"`
	CredentialsVersion int        `json:"credentials_version"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
}

func storeBody(s domain.Store) storeJSON {
	return storeJSON{ID: s.ID.String(), Platform: s.Platform, ShopID: s.ShopID, Name: s.Name, Status: string(s.Status),
		StatusReason: s.StatusReason, ShopName: s.ShopName, VerifiedAt: s.VerifiedAt, CredentialsVersion: s.CredentialsVersion,
		CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

func (s *Server) createStore(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Platform    string           `json:"platform"`
		ShopID      string           `json:"shop_id"`
		Name        string           `json:"name"`
		Credentials port.Credentials `json:"credentials"`
	}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	cmd := commands.CreateStore{StoreID: domain.NewID(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()),
		Platform: in.Platform, ShopID: in.ShopID, Name: in.Name, Credentials: in.Credentials}
	execute(s, w, r, body, s.app.Commands.CreateStore, cmd,
		startRender(http.StatusCreated, "store", func(v domain.Store) any { return storeBody(v) }))
}

func (s *Server) listStores(w http.ResponseWriter, r *http.Request) {
	getList[domain.Store](s, w, r, s.app.Queries.Stores, func(v domain.Store) any { return storeBody(v) })
}

func (s *Server) getStore(w http.ResponseWriter, r *http.Request) {
	getOne[domain.Store](s, w, r, "store_id", domain.ErrStoreNotFound, s.app.Queries.Stores, "store",
		func(v domain.Store) any { return storeBody(v) })
}

// storeCommand serves an idempotent command about the {store_id} of the path: it decodes the
// body into in, builds the command for the store and runs it.
func storeCommand[C bus.Command, R any](s *Server, w http.ResponseWriter, r *http.Request, in any,
	h bus.Handler[C, R], build func(storeID uuid.UUID) C, render bus.RenderFunc) {
	id, err := pathID(r, "store_id", domain.ErrStoreNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, ok := s.decode(w, r, in)
	if !ok {
		return
	}
	execute(s, w, r, body, h, build(id), render)
}

func (s *Server) replaceStoreAuthorization(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Credentials port.Credentials `json:"credentials"`
	}
	storeCommand(s, w, r, &in, s.app.Commands.ReplaceStoreAuthorization, func(id uuid.UUID) commands.ReplaceStoreAuthorization {
		return commands.ReplaceStoreAuthorization{StoreID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), Credentials: in.Credentials}
	}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return storeBody(v) }))
}

func (s *Server) verifyStore(w http.ResponseWriter, r *http.Request) {
	storeCommand(s, w, r, &struct{}{}, s.app.Commands.VerifyStore, func(id uuid.UUID) commands.VerifyStore {
		return commands.VerifyStore{StoreID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context())}
	}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return storeBody(v) }))
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
