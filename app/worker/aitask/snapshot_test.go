package aitask

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/internal/workertest"
)

// recordingProvider records the prompts a handler sends.
type recordingProvider struct {
	port.AIProvider
	mu      sync.Mutex
	prompts []string
}

func (r *recordingProvider) record(prompt string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prompts = append(r.prompts, prompt)
}

func (r *recordingProvider) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.prompts...)
}

func (r *recordingProvider) CompleteText(ctx context.Context, key, model, prompt string) (port.AIResult, error) {
	r.record(prompt)
	return r.AIProvider.CompleteText(ctx, key, model, prompt)
}

func (r *recordingProvider) GenerateImage(ctx context.Context, key, prompt string) (port.ImageResult, error) {
	r.record(prompt)
	return r.AIProvider.GenerateImage(ctx, key, prompt)
}

var skillet = domain.ProductContent{Title: "Cast iron skillet 28 cm", Description: "Pre-seasoned, oven safe to 260 °C.",
	Price: "39.90", Currency: "EUR"}

// request creates a product and runs the CreateAITask command about it, as the HTTP API
// does; it returns the task and the job the outbox delivers: the event exactly as the command
// stored it.
func (b *bundle) request(t *testing.T, kind, instruction string) (domain.AITask, worker.Job) {
	t.Helper()
	product, err := domain.NewProduct(uuid.New(), b.Workspace, skillet, time.Now())
	require.NoError(t, err)
	b.InTx(t, func(ctx context.Context) error { return postgres.Products{}.Insert(ctx, product) })
	h := commands.NewCreateAITaskHandler(commands.FlowDeps{Operations: b.Deps.Operations, Events: b.Deps.Events, Now: time.Now},
		postgres.Products{}, postgres.NewAITasks())
	var started commands.Started[domain.AITask]
	b.InTx(t, func(ctx context.Context) error {
		started, err = h.Handle(ctx, commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
			Kind: kind, ProductID: product.ID, Prompt: instruction})
		return err
	})
	var id uuid.UUID
	var payload json.RawMessage
	require.NoError(t, b.DB.Owner.QueryRow(context.Background(), `SELECT id, event_payload FROM outbox_all_events
		WHERE event_type = 'ai_task.requested' AND aggregate_id = $1`, started.Resource.ID.String()).Scan(&id, &payload))
	return started.Resource, worker.Job{ID: id.String(), WorkspaceID: b.Workspace, EventType: "ai_task.requested",
		Payload: payload, Attempt: 1}
}

// saveDraft saves a new draft of the product, as PUT …/draft does.
func (b *bundle) saveDraft(t *testing.T, id uuid.UUID, c domain.ProductContent) {
	t.Helper()
	b.InTx(t, func(ctx context.Context) error {
		_, err := postgres.Products{}.Update(ctx, id, func(p *domain.Product) error { return p.SaveDraft(p.Revision, c, time.Now()) })
		return err
	})
}

var (
	enamel = domain.ProductContent{Title: "Enamelled casserole 24 cm", Description: "Blue enamel.", Price: "59.00", Currency: "EUR"}
	wok    = domain.ProductContent{Title: "Carbon steel wok", Description: "Flat bottom.", Price: "29.00", Currency: "EUR"}
)

func endpointOf(kind string) string {
	if kind == domain.AIKindImage {
		return aiprovider.EndpointImages
	}
	return aiprovider.EndpointChat
}

// The product is edited after the request and again between a delivery that reached the
// provider (its answer was lost) and the redelivery: both deliveries send the same request,
// about the product as requested, so the provider answers the redelivery from its
// Idempotency-Key cache and the task succeeds, billed once.
func TestEditsAfterTheRequestDoNotChangeTheProviderRequest(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{domain.AIKindText, domain.AIKindCategory, domain.AIKindImage} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := &recordingProvider{AIProvider: b.client}
			h := b.handler(t, rec)
			ctx := context.Background()
			task, job := b.request(t, kind, "Keep it short.")
			require.Equal(t, &domain.ProductSnapshot{Revision: 1, Title: skillet.Title, Description: skillet.Description,
				Price: "39.90", Currency: "EUR", Images: []string{}}, task.Snapshot)
			var ev map[string]any
			require.NoError(t, json.Unmarshal(job.Payload, &ev))
			require.Len(t, ev, 4, "the event carries ids and the kind only: %v", ev)
			require.NotContains(t, string(job.Payload), "skillet")

			b.saveDraft(t, task.ProductID, enamel)
			b.sb.InjectFault(sandbox.Fault{Endpoint: endpointOf(kind), Status: http.StatusBadGateway, AfterEffect: true})
			err := h.Handle(ctx, job)
			require.Error(t, err)
			require.False(t, worker.IsPermanent(err))
			require.Equal(t, 1, b.sb.Executions(endpointOf(kind)), "the first delivery reached the provider")

			b.saveDraft(t, task.ProductID, wok)
			job.Attempt = 2
			require.NoError(t, h.Handle(ctx, job))

			sent := rec.sent()
			require.Len(t, sent, 2)
			require.Equal(t, sent[0], sent[1], "every delivery sends the same request")
			require.Equal(t, prompt(task), sent[0])
			require.Contains(t, sent[0], "Product title: Cast iron skillet 28 cm")
			require.NotContains(t, sent[0], "Enamelled")
			require.NotContains(t, sent[0], "wok")

			got, op := b.load(t, task.ID)
			require.Equal(t, domain.TaskSucceeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
			require.Equal(t, domain.OperationSucceeded, op.Status)
			require.Equal(t, task.Snapshot, got.Snapshot, "the snapshot never changes")
			require.Equal(t, 1, b.sb.Executions(endpointOf(kind)), "billed once")
			require.Equal(t, 1, b.sb.Stats().Replays, "the redelivery was answered from the provider's cache")
			require.Len(t, b.ledger(t, task.ID), 1)
			if kind == domain.AIKindText {
				require.Contains(t, string(got.Output), "Cast iron skillet")
			}
		})
	}
}

// A task stored before snapshots existed gets one, once, when it starts: from then on it is
// the same as any other task.
func TestTaskWithoutSnapshotCapturesOneOnItsFirstStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recordingProvider{AIProvider: b.client}
	h := b.handler(t, rec)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "")
	_, err := b.DB.Owner.Exec(ctx, `UPDATE ai_tasks SET product_snapshot = NULL WHERE id = $1`, task.ID)
	require.NoError(t, err)
	require.Nil(t, workertest.Load(t, b.Env, postgres.NewAITasks(), task.ID).Snapshot)
	job := b.job(t, task)

	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusBadGateway, AfterEffect: true})
	require.Error(t, h.Handle(ctx, job))
	mid, _ := b.load(t, task.ID)
	require.Equal(t, task.Snapshot, mid.Snapshot, "captured from the product at the first start")

	b.saveDraft(t, task.ProductID, wok)
	job.Attempt = 2
	require.NoError(t, h.Handle(ctx, job))

	sent := rec.sent()
	require.Len(t, sent, 2)
	require.Equal(t, sent[0], sent[1])
	require.Contains(t, sent[0], "Cast iron skillet")
	got, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, task.Snapshot, got.Snapshot)
	require.Equal(t, 1, b.chatExecutions())
	require.Len(t, b.ledger(t, task.ID), 1)
}
