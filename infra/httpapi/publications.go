package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/unpublish"
	"github.com/listingkit/listing/domain"
)

type publicationJSON struct {
	ID                string            `json:"id"`
	ProductID         string            `json:"product_id"`
	StoreID           string            `json:"store_id"`
	ProductRevision   int               `json:"product_revision"`
	Status            string            `json:"status"`
	ExternalProductID string            `json:"external_product_id,omitempty"`
	Error             *worker.ErrorJSON `json:"error"`
	// Unpublished and UnpublishedAt are set once an unpublish succeeded, else omitted.
	Unpublished   bool       `json:"unpublished,omitempty"`
	UnpublishedAt *time.Time `json:"unpublished_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

func publicationBody(p domain.Publication) publicationJSON {
	return publicationJSON{ID: p.ID.String(), ProductID: p.ProductID.String(), StoreID: p.StoreID.String(), ProductRevision: p.ProductRevision,
		Status: string(p.Status), ExternalProductID: p.ExternalProductID, Error: worker.TaskError(p.Task), CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		Unpublished: p.UnpublishedAt != nil, UnpublishedAt: p.UnpublishedAt}
}

// unpublishCommand is listing.unpublish: the publication's product taken off its store.
func (s *Server) unpublishCommand() Command {
	return Command{Type: "listing.unpublish", Params: []Param{{"publication_id", domain.ErrPublicationNotFound}},
		Run: Runs(s.app.Bus, s.app.Commands.UnpublishPublication, func(_ context.Context, c Call, _ struct{}) (commands.UnpublishPublication, error) {
			return commands.UnpublishPublication{UnpublishID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				PublicationID: c.IDs["publication_id"]}, nil
		}, startRender(http.StatusAccepted, "unpublish", func(v domain.Unpublish) any { return unpublish.Body(v) }))}
}

// startUnderPublication serves a POST that starts a task of the publication in the path: an
// empty JSON body, the command made from the workspace, the user and the publication, and
// 202 with the task under key (its JSON: body) and its operation.
func startUnderPublication[C bus.Command, T any](s *Server, w http.ResponseWriter, r *http.Request,
	h bus.Handler[C, commands.Started[T]], newCmd func(ws, user, pid uuid.UUID) C, key string, body func(task any) any) {
	pid, err := pathID(r, "publication_id", domain.ErrPublicationNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	raw, ok := s.decode(w, r, &struct{}{})
	if !ok {
		return
	}
	execute(s, w, r, raw, h, newCmd(workspaceID(r.Context()), userID(r.Context()), pid), startRender(http.StatusAccepted, key, func(v T) any { return body(v) }))
}

// publishIn is listing.publish's body.
type publishIn struct {
	StoreID string `json:"store_id"`
}

// publishCommand is listing.publish: a first publication of the product on a store.
func (s *Server) publishCommand() Command {
	return Command{Type: "listing.publish", Params: []Param{{"product_id", domain.ErrProductNotFound}},
		Run: Runs(s.app.Bus, s.app.Commands.PublishProduct, func(_ context.Context, c Call, in publishIn) (commands.PublishProduct, error) {
			storeID, err := uuid.Parse(in.StoreID)
			if err != nil {
				return commands.PublishProduct{}, domain.Invalid("store_id", "must be a store id")
			}
			return commands.PublishProduct{PublicationID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				ProductID: c.IDs["product_id"], StoreID: storeID}, nil
		}, startRender(http.StatusAccepted, "publication", func(v domain.Publication) any { return publicationBody(v) }))}
}

func (s *Server) listPublications(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.Publications, func(v domain.Publication) any { return publicationBody(v) })
}

func (s *Server) getPublication(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "publication_id", domain.ErrPublicationNotFound, s.app.Queries.Publications, "publication",
		func(v domain.Publication) any { return publicationBody(v) })
}

func (s *Server) listProductPublications(w http.ResponseWriter, r *http.Request) {
	listUnder(s, w, r, "product_id", domain.ErrProductNotFound, s.app.Queries.ProductPublications,
		func(v domain.Publication) any { return publicationBody(v) })
}
