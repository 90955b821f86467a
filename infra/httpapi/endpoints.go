package httpapi

import (
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker/aitask"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/idem"
)

// Endpoint is one operation of the API as openapi.yaml and docs/http-api.md present it: its
// route, its operationId, and every error it may answer. Both documents are generated from
// Endpoints (TestEndpointDocsAreCurrent, make api-doc), and the routes of Endpoints are
// exactly those the router serves (TestEndpointsMatchRoutes), so neither can drift.
type Endpoint struct {
	Method, Path string
	// OperationID names the operation in openapi.yaml (lowerCamelCase, unique).
	OperationID string
	// Errors are the errors the operation may answer, the shared ones included (see the
	// sets below); each is rendered under its HTTP status (StatusOf its Kind).
	Errors []*domain.Error
}

// Error sets shared by endpoints.
var (
	// errsAny: any /v1 operation may fail inside, or find a dependency down.
	errsAny = []*domain.Error{domain.ErrInternal, domain.ErrUnavailable}
	// errsSession: a bearer token is required.
	errsSession = append([]*domain.Error{domain.ErrUnauthenticated}, errsAny...)
	// errsMember: a workspace path; non-members get 404 like a workspace that does not exist;
	// members beyond the workspace's budget (WORKSPACE_RATE_LIMIT) 429.
	errsMember = append([]*domain.Error{errWorkspaceNotFound, domain.ErrRateLimited}, errsSession...)
	// errsBody: a strict JSON body.
	errsBody = []*domain.Error{errMalformed, errUnknownField, domain.ErrInvalidInput, domain.ErrUnstorableInput,
		errBodyTooLarge, errMediaType}
	// errsPage: limit and cursor of a list.
	errsPage = []*domain.Error{domain.ErrInvalidInput}
	// errsKeyOptional: Idempotency-Key accepted; errsKey: Idempotency-Key required.
	errsKeyOptional = []*domain.Error{idem.ErrKeyInvalid, idem.ErrKeyReused, idem.ErrRequestInProgress,
		idem.ErrResponseTooLarge, domain.ErrRetryable}
	errsKey = append([]*domain.Error{idem.ErrKeyMissing}, errsKeyOptional...)
	// errsAuth: the unauthenticated auth calls, rate limited per address and account.
	errsAuth = append([]*domain.Error{domain.ErrRateLimited}, errsAny...)
)

// errs joins sets and single errors into one list (duplicates are rendered once).
func errs(parts ...[]*domain.Error) []*domain.Error {
	var out []*domain.Error
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// one is a set of the given errors.
func one(e ...*domain.Error) []*domain.Error { return e }

const ws = "/v1/workspaces/{workspace_id}"

// Endpoints lists every operation the router serves, with its errors. Extend it beside the
// route in routes (server.go); the GET routes of the flows' task resources are derived from
// the registry (tasks.go).
func Endpoints() []Endpoint {
	page := errs(errsMember, errsPage)
	command := func(specific ...*domain.Error) []*domain.Error { return errs(errsMember, errsBody, errsKey, specific) }
	return withTaskEndpoints([]Endpoint{
		{"GET", "/", "redirectToDocs", nil},
		{"GET", "/docs", "getDocs", nil},
		{"GET", "/healthz", "getHealth", nil},
		{"GET", "/readyz", "getReadiness", nil},
		{"GET", "/metrics", "getMetrics", nil},
		{"GET", "/openapi.yaml", "getOpenAPIDocument", nil},

		{"POST", "/v1/auth/register", "register", errs(errsAuth, errsBody, one(domain.ErrEmailTaken, domain.ErrServiceBusy))},
		{"POST", "/v1/auth/login", "login", errs(errsAuth, errsBody, one(domain.ErrInvalidCredentials, domain.ErrServiceBusy))},
		{"POST", "/v1/auth/refresh", "refreshSession", errs(errsAuth, errsBody, one(domain.ErrRefreshTokenInvalid, domain.ErrRefreshTokenReused))},
		{"GET", "/v1/workspaces", "listWorkspaces", errsSession},

		{"POST", ws + "/products", "createProduct", errs(errsMember, errsBody, errsKeyOptional)},
		{"GET", ws + "/products", "listProducts", page},
		{"GET", ws + "/products/{product_id}", "getProduct", errs(errsMember, one(domain.ErrProductNotFound))},
		{"PUT", ws + "/products/{product_id}/draft", "saveProductDraft", errs(errsMember, errsBody,
			one(domain.ErrProductNotFound, domain.ErrRevisionMismatch, domain.ErrPreconditionRequired))},
		{"POST", ws + "/products/{product_id}/publications", "publishProduct", command(domain.ErrProductNotFound,
			domain.ErrStoreNotFound, domain.ErrStoreNotVerified, domain.ErrProductAlreadyPublished)},
		{"GET", ws + "/products/{product_id}/publications", "listProductPublications", errs(page, one(domain.ErrProductNotFound))},

		{"GET", ws + "/operations", "listOperations", page},
		{"GET", ws + "/operations/{operation_id}", "getOperation", errs(errsMember, one(domain.ErrOperationNotFound))},
		{"POST", ws + "/operations/{operation_id}/cancel", "cancelOperation", errs(errsMember, errsBody, errsKeyOptional,
			one(domain.ErrOperationNotFound, domain.ErrTaskStarted, domain.ErrOperationFinished, domain.ErrOperationNotCancellable))},

		{"POST", ws + "/stores", "createStore", command(domain.ErrPlatformUnsupported, port.ErrCredentialsInvalid, domain.ErrStoreExists)},
		{"GET", ws + "/stores", "listStores", page},
		{"GET", ws + "/stores/{store_id}", "getStore", errs(errsMember, one(domain.ErrStoreNotFound))},
		{"PUT", ws + "/stores/{store_id}/rate-limit", "setStoreRateLimit", errs(errsMember, errsBody, one(domain.ErrStoreNotFound))},
		{"DELETE", ws + "/stores/{store_id}/rate-limit", "deleteStoreRateLimit", errs(errsMember, one(domain.ErrStoreNotFound))},
		{"PUT", ws + "/stores/{store_id}/authorization", "replaceStoreAuthorization", command(domain.ErrStoreNotFound, port.ErrCredentialsInvalid)},
		{"POST", ws + "/stores/{store_id}/verifications", "verifyStore", command(domain.ErrStoreNotFound)},
		{"GET", ws + "/stores/{store_id}/verifications", "listStoreVerifications", errs(page, one(domain.ErrStoreNotFound))},
		{"POST", ws + "/stores/{store_id}/product-syncs", "syncStore", command(domain.ErrStoreNotFound,
			domain.ErrStoreNotVerified, domain.ErrProductSyncAlreadyActive)},
		{"GET", ws + "/stores/{store_id}/product-syncs", "listStoreProductSyncs", errs(page, one(domain.ErrStoreNotFound))},
		{"GET", ws + "/product-syncs", "listProductSyncs", page},
		{"GET", ws + "/product-syncs/{sync_id}", "getProductSync", errs(errsMember, one(domain.ErrProductSyncNotFound))},

		{"POST", ws + "/media", "createMedia", errs(errsMember, errsBody, one(domain.ErrMediaTypeUnsupported,
			domain.ErrMediaTooLarge, port.ErrStorageUnavailable))},
		{"GET", ws + "/media", "listMedia", page},
		{"GET", ws + "/media/{media_id}", "getMedia", errs(errsMember, one(domain.ErrMediaNotFound))},
		{"POST", ws + "/media/{media_id}/complete", "completeMedia", command(domain.ErrMediaNotFound,
			domain.ErrMediaNotUploaded, domain.ErrMediaAlreadyComplete, port.ErrStorageUnavailable)},

		{"POST", ws + "/material-transfers", "createMaterialTransfer", command(domain.ErrSourceURLInvalid, port.ErrSourceURLForbidden)},
		{"GET", ws + "/material-transfers", "listMaterialTransfers", page},
		{"GET", ws + "/material-transfers/{transfer_id}", "getMaterialTransfer", errs(errsMember, one(domain.ErrTransferNotFound))},

		{"GET", ws + "/publications", "listPublications", page},
		{"GET", ws + "/publications/{publication_id}", "getPublication", errs(errsMember, one(domain.ErrPublicationNotFound))},
		{"POST", ws + "/publications/{publication_id}/updates", "updateListing", command(domain.ErrPublicationNotFound,
			domain.ErrPublicationNotPublished, domain.ErrPublicationUnpublished)},
		{"POST", ws + "/publications/{publication_id}/unpublish", "unpublish", command(domain.ErrPublicationNotFound,
			domain.ErrPublicationNotPublished, domain.ErrPublicationUnpublished)},

		{"POST", ws + "/ai-tasks", "createAITask", command(aitask.ErrKindUnsupported, domain.ErrProductNotFound)},
		{"GET", ws + "/ai-tasks", "listAITasks", page},
		{"GET", ws + "/ai-tasks/{ai_task_id}", "getAITask", errs(errsMember, one(domain.ErrAITaskNotFound))},

		{"POST", ws + "/integrations", "createIntegration", errs(errsMember, errsBody, one(domain.ErrOwnerRequired))},
		{"GET", ws + "/integrations", "listIntegrations", errs(page, one(domain.ErrOwnerRequired))},
		{"DELETE", ws + "/integrations/{integration_id}", "revokeIntegration", errs(errsMember,
			one(domain.ErrOwnerRequired, domain.ErrIntegrationNotFound))},
	})
}
