package httpapi

import (
	"encoding/json"

	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/domain"
)

// The first-adopter endpoints (API.md). Every POST/PUT here that starts asynchronous work
// requires Idempotency-Key and answers {"<resource>": …, "operation": …}.

type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func taskError(t domain.Task) *errorJSON {
	if t.Status != domain.TaskFailed {
		return nil
	}
	return &errorJSON{Code: t.ErrorCode, Message: t.ErrorMessage}
}

type operationJSON struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	Status    string            `json:"status"`
	Resource  map[string]string `json:"resource"`
	Result    json.RawMessage   `json:"result"`
	Error     *errorJSON        `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

func operationBody(o domain.Operation) operationJSON {
	out := operationJSON{ID: o.ID.String(), Type: o.Type, Status: string(o.Status),
		Resource: map[string]string{"type": o.ResourceType, "id": o.ResourceID.String()},
		Result:   o.Result, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC()}
	if len(out.Result) == 0 {
		out.Result = json.RawMessage("null")
	}
	if o.Status == domain.OperationFailed {
		out.Error = &errorJSON{Code: o.ErrorCode, Message: o.ErrorMessage}
	}
	return out
}

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

type mediaJSON struct {
	ID           string                `json:"id"`
	Filename     string                `json:"filename"`
	ContentType  string                `json:"content_type"`
	Size         int64                 `json:"size"`
	Status       string                `json:"status"`
	Source       string                `json:"source"`
	SniffedType  string                `json:"sniffed_type,omitempty"`
	Width        int                   `json:"width,omitempty"`
	Height       int                   `json:"height,omitempty"`
	Variants     []domain.MediaVariant `json:"variants"`
	RejectReason string                `json:"reject_reason,omitempty"`
	CreatedAt    time.Time             `json:"created_at"`
	UpdatedAt    time.Time             `json:"updated_at"`
}

func mediaBody(m domain.Media) mediaJSON {
	v := m.Variants
	if v == nil {
		v = []domain.MediaVariant{}
	}
	return mediaJSON{ID: m.ID.String(), Filename: m.Filename, ContentType: m.ContentType, Size: m.Size, Status: string(m.Status),
		Source: m.Source, SniffedType: m.SniffedType, Width: m.Width, Height: m.Height, Variants: v, RejectReason: m.RejectReason,
		CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC()}
}

type transferJSON struct {
	ID        string     `json:"id"`
	SourceURL string     `json:"source_url"`
	Status    string     `json:"status"`
	MediaID   string     `json:"media_id"`
	Bytes     int64      `json:"bytes"`
	Error     *errorJSON `json:"error"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// withoutQuery drops the query and fragment of a source URL before it is shown or stored
// in a response: a signed source URL carries its signature there.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

func transferBody(t domain.MaterialTransfer) transferJSON {
	return transferJSON{ID: t.ID.String(), SourceURL: withoutQuery(t.SourceURL), Status: string(t.Status), MediaID: t.MediaID.String(),
		Bytes: t.Bytes, Error: taskError(t.Task), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
}

type publicationJSON struct {
	ID                string     `json:"id"`
	ProductID         string     `json:"product_id"`
	StoreID           string     `json:"store_id"`
	ProductRevision   int        `json:"product_revision"`
	Status            string     `json:"status"`
	ExternalProductID string     `json:"external_product_id,omitempty"`
	Error             *errorJSON `json:"error"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
}

func publicationBody(p domain.Publication) publicationJSON {
	return publicationJSON{ID: p.ID.String(), ProductID: p.ProductID.String(), StoreID: p.StoreID.String(), ProductRevision: p.ProductRevision,
		Status: string(p.Status), ExternalProductID: p.ExternalProductID, Error: taskError(p.Task), CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}
}

type syncJSON struct {
	ID          string     `json:"id"`
	StoreID     string     `json:"store_id"`
	Status      string     `json:"status"`
	PagesDone   int        `json:"pages_done"`
	ItemsSynced int        `json:"items_synced"`
	Error       *errorJSON `json:"error"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

func syncBody(s domain.ProductSync) syncJSON {
	return syncJSON{ID: s.ID.String(), StoreID: s.StoreID.String(), Status: string(s.Status), PagesDone: s.PagesDone,
		ItemsSynced: s.ItemsSynced, Error: taskError(s.Task), CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

type aiTaskJSON struct {
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	ProductID string            `json:"product_id"`
	Input     map[string]string `json:"input"`
	Status    string            `json:"status"`
	Output    json.RawMessage   `json:"output"`
	Error     *errorJSON        `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

func aiTaskBody(t domain.AITask) aiTaskJSON {
	out := aiTaskJSON{ID: t.ID.String(), Kind: t.Kind, ProductID: t.ProductID.String(), Input: map[string]string{"prompt": t.Prompt},
		Status: string(t.Status), Output: t.Output, Error: taskError(t.Task), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
	if len(out.Output) == 0 {
		out.Output = json.RawMessage("null")
	}
	return out
}

// startRender renders a Started result as {"<name>": body, "operation": …} with status.
func startRender[T any](status int, name string, body func(T) any) bus.RenderFunc {
	return func(result any) (bus.Response, error) {
		s := result.(commands.Started[T])
		return jsonResponse(status, map[string]any{name: body(s.Resource), "operation": operationBody(s.Operation)}, nil)
	}
}

// execute decodes nothing: it runs an already-built command through the bus as an
// idempotent request (Idempotency-Key required) and writes the stored or rendered response.
func execute[C bus.Command, R any](s *Server, w http.ResponseWriter, r *http.Request, body []byte, h bus.Handler[C, R], cmd C, render bus.RenderFunc) {
	idem, err := s.idempotency(r, body, true, render)
	if err != nil {
		writeError(w, r, err)
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, h, bus.Request[C]{Command: cmd, Actor: s.actor(r), Idempotency: idem})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.respond(w, r, reply.Response, reply.Replayed, true, reply.Result, render)
}

// decode reads and strictly decodes the JSON body into dst, returning the raw bytes for the
// fingerprint.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) ([]byte, bool) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err == nil {
		err = decodeStrict(body, dst)
	}
	if err != nil {
		writeError(w, r, err)
		return nil, false
	}
	return body, true
}

func pathID(r *http.Request, name string, nf *domain.Error) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, name))
	if err != nil {
		return uuid.Nil, nf
	}
	return id, nil
}

// getOne serves GET of one aggregate.
func getOne[T any](s *Server, w http.ResponseWriter, r *http.Request, param string, nf *domain.Error, repo port.Repository[T], name string, body func(T) any) {
	id, err := pathID(r, param, nf)
	if err != nil {
		writeError(w, r, err)
		return
	}
	v, err := query.Get(r.Context(), s.app.Queries.Tx, s.scope(r), repo, id)
	if err != nil {
		writeError(w, r, notFoundAs(err, nf))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{name: body(v)})
}

// getList serves GET of a list, newest first.
func getList[T any](s *Server, w http.ResponseWriter, r *http.Request, repo port.Repository[T], body func(T) any) {
	page, err := pageOf(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := query.List(r.Context(), s.app.Queries.Tx, s.scope(r), repo, page)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]any, 0, len(items))
	for _, v := range items {
		out = append(out, body(v))
	}
	writeJSON(w, http.StatusOK, listBody(out, next))
}

func (s *Server) flowRoutes(r chi.Router) {
	q := s.app.Queries
	r.Get("/operations", func(w http.ResponseWriter, r *http.Request) {
		getList(s, w, r, q.Operations, func(o domain.Operation) any { return operationBody(o) })
	})
	r.Get("/operations/{operation_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne(s, w, r, "operation_id", errOperationNotFound, q.Operations, "operation", func(o domain.Operation) any { return operationBody(o) })
	})

	r.Post("/stores", s.createStore)
	r.Get("/stores", func(w http.ResponseWriter, r *http.Request) {
		getList[domain.Store](s, w, r, q.Stores, func(v domain.Store) any { return storeBody(v) })
	})
	r.Get("/stores/{store_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne[domain.Store](s, w, r, "store_id", domain.ErrStoreNotFound, q.Stores, "store", func(v domain.Store) any { return storeBody(v) })
	})
	r.Put("/stores/{store_id}/authorization", s.replaceStoreAuthorization)
	r.Post("/stores/{store_id}/verifications", s.verifyStore)
	r.Post("/stores/{store_id}/product-syncs", s.syncStore)

	r.Get("/product-syncs", func(w http.ResponseWriter, r *http.Request) {
		getList[domain.ProductSync](s, w, r, q.Syncs, func(v domain.ProductSync) any { return syncBody(v) })
	})
	r.Get("/product-syncs/{sync_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne[domain.ProductSync](s, w, r, "sync_id", domain.ErrProductSyncNotFound, q.Syncs, "sync", func(v domain.ProductSync) any { return syncBody(v) })
	})

	r.Post("/media", s.createMedia)
	r.Get("/media", func(w http.ResponseWriter, r *http.Request) {
		getList(s, w, r, q.Media, func(v domain.Media) any { return mediaBody(v) })
	})
	r.Get("/media/{media_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne(s, w, r, "media_id", domain.ErrMediaNotFound, q.Media, "media", func(v domain.Media) any { return mediaBody(v) })
	})
	r.Post("/media/{media_id}/complete", s.completeMedia)

	r.Post("/material-transfers", s.createTransfer)
	r.Get("/material-transfers", func(w http.ResponseWriter, r *http.Request) {
		getList(s, w, r, q.Transfers, func(v domain.MaterialTransfer) any { return transferBody(v) })
	})
	r.Get("/material-transfers/{transfer_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne(s, w, r, "transfer_id", domain.ErrTransferNotFound, q.Transfers, "transfer", func(v domain.MaterialTransfer) any { return transferBody(v) })
	})

	r.Post("/products/{product_id}/publications", s.publishProduct)
	r.Get("/publications", func(w http.ResponseWriter, r *http.Request) {
		getList(s, w, r, q.Publications, func(v domain.Publication) any { return publicationBody(v) })
	})
	r.Get("/publications/{publication_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne(s, w, r, "publication_id", domain.ErrPublicationNotFound, q.Publications, "publication", func(v domain.Publication) any { return publicationBody(v) })
	})

	r.Post("/ai-tasks", s.createAITask)
	r.Get("/ai-tasks", func(w http.ResponseWriter, r *http.Request) {
		getList(s, w, r, q.AITasks, func(v domain.AITask) any { return aiTaskBody(v) })
	})
	r.Get("/ai-tasks/{ai_task_id}", func(w http.ResponseWriter, r *http.Request) {
		getOne(s, w, r, "ai_task_id", domain.ErrAITaskNotFound, q.AITasks, "ai_task", func(v domain.AITask) any { return aiTaskBody(v) })
	})
}

var errOperationNotFound = domain.NewError(domain.KindNotFound, "OPERATION_NOT_FOUND", "the operation does not exist")

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
	cmd := commands.CreateStore{StoreID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()),
		Platform: in.Platform, ShopID: in.ShopID, Name: in.Name, Credentials: in.Credentials}
	execute(s, w, r, body, s.app.Commands.CreateStore, cmd,
		startRender(http.StatusCreated, "store", func(v domain.Store) any { return storeBody(v) }))
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

func (s *Server) syncStore(w http.ResponseWriter, r *http.Request) {
	storeCommand(s, w, r, &struct{}{}, s.app.Commands.SyncStoreProducts, func(id uuid.UUID) commands.SyncStoreProducts {
		return commands.SyncStoreProducts{SyncID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), StoreID: id}
	}, startRender(http.StatusAccepted, "sync", func(v domain.ProductSync) any { return syncBody(v) }))
}

// createMedia is not idempotent-stored: its answer holds an upload URL (a presigned URL on
// S3), which must never be kept in the idempotency store.
func (s *Server) createMedia(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Filename    string `json:"filename"`
		ContentType string `json:"content_type"`
		Size        int64  `json:"size"`
	}
	if _, ok := s.decode(w, r, &in); !ok {
		return
	}
	reply, err := bus.Execute(r.Context(), s.app.Bus, s.app.Commands.CreateMedia, bus.Request[commands.CreateMedia]{
		Command: commands.CreateMedia{MediaID: uuid.New(), WorkspaceID: workspaceID(r.Context()), Filename: in.Filename, ContentType: in.ContentType, Size: in.Size},
		Actor:   s.actor(r),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	up := reply.Result.Upload
	writeJSON(w, http.StatusCreated, map[string]any{"media": mediaBody(reply.Result.Media),
		"upload": map[string]any{"method": up.Method, "url": up.URL, "headers": up.Headers, "expires_at": up.ExpiresAt.UTC()}})
}

func (s *Server) completeMedia(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "media_id", domain.ErrMediaNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var in struct{}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	size, err := s.app.Queries.MediaObject(r.Context(), s.scope(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	cmd := commands.CompleteMediaUpload{MediaID: id, WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), UploadedSize: size}
	execute(s, w, r, body, s.app.Commands.CompleteMediaUpload, cmd,
		startRender(http.StatusAccepted, "media", func(v domain.Media) any { return mediaBody(v) }))
}

func (s *Server) createTransfer(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SourceURL string `json:"source_url"`
	}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	if err := s.app.Queries.CheckSourceURL(r.Context(), in.SourceURL); err != nil {
		writeError(w, r, err)
		return
	}
	cmd := commands.CreateMaterialTransfer{TransferID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), SourceURL: in.SourceURL}
	execute(s, w, r, body, s.app.Commands.CreateMaterialTransfer, cmd,
		startRender(http.StatusAccepted, "transfer", func(v domain.MaterialTransfer) any { return transferBody(v) }))
}

func (s *Server) publishProduct(w http.ResponseWriter, r *http.Request) {
	pid, err := pathID(r, "product_id", errProductNotFound)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var in struct {
		StoreID string `json:"store_id"`
	}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	storeID, err := uuid.Parse(in.StoreID)
	if err != nil {
		writeError(w, r, domain.Invalid("store_id", "must be a store id"))
		return
	}
	cmd := commands.PublishProduct{PublicationID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()), ProductID: pid, StoreID: storeID}
	execute(s, w, r, body, s.app.Commands.PublishProduct, cmd,
		startRender(http.StatusAccepted, "publication", func(v domain.Publication) any { return publicationBody(v) }))
}

func (s *Server) createAITask(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Kind      string `json:"kind"`
		ProductID string `json:"product_id"`
		Input     struct {
			Prompt string `json:"prompt"`
		} `json:"input"`
	}
	body, ok := s.decode(w, r, &in)
	if !ok {
		return
	}
	pid, err := uuid.Parse(in.ProductID)
	if err != nil {
		writeError(w, r, domain.Invalid("product_id", "must be a product id"))
		return
	}
	cmd := commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: workspaceID(r.Context()), UserID: userID(r.Context()),
		Kind: in.Kind, ProductID: pid, Prompt: in.Input.Prompt}
	execute(s, w, r, body, s.app.Commands.CreateAITask, cmd,
		startRender(http.StatusAccepted, "ai_task", func(v domain.AITask) any { return aiTaskBody(v) }))
}
