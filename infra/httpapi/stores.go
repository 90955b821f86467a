package httpapi

import (
	"context"
	"net/http"
	"time"

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
		}, startRender(http.StatusCreated, "store", func(v domain.Store) any { return storeBody(v) }))}
}

func (s *Server) listStores(w http.ResponseWriter, r *http.Request) {
	getList[domain.Store](s, w, r, s.app.Queries.Stores, func(v domain.Store) any { return storeBody(v) })
}

func (s *Server) getStore(w http.ResponseWriter, r *http.Request) {
	getOne[domain.Store](s, w, r, "store_id", domain.ErrStoreNotFound, s.app.Queries.Stores, "store",
		func(v domain.Store) any { return storeBody(v) })
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
		}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return storeBody(v) }))}
}

// verifyStoreCommand is listing.verify_store: the store's credentials verified again.
func (s *Server) verifyStoreCommand() Command {
	return Command{Type: "listing.verify_store", Params: storeParam,
		Run: Runs(s.app.Bus, s.app.Commands.VerifyStore, func(_ context.Context, c Call, _ struct{}) (commands.VerifyStore, error) {
			return commands.VerifyStore{StoreID: c.IDs["store_id"], WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID}, nil
		}, startRender(http.StatusAccepted, "store", func(v domain.Store) any { return storeBody(v) }))}
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
