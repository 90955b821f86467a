package aitask

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/ai"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/storage"
	"github.com/listingkit/listing/internal/workertest"
)

const aiKey = "sk-ai-canary-5d1e"

type bundle struct {
	*workertest.Env
	sb     *aiprovider.Sandbox
	srvURL string
	client *ai.Client
	dir    string
	store  *storage.Local
	h      *Handler
	// reply overrides the sandbox's chat answer when set.
	mu    sync.Mutex
	reply func(model, prompt string) string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{Env: workertest.New(t), dir: t.TempDir()}
	discard := slog.New(slog.DiscardHandler)
	var err error
	b.sb, err = aiprovider.New(aiprovider.Config{
		APIKeys: []string{aiKey},
		ReplyFunc: func(model, prompt string) string {
			b.mu.Lock()
			reply := b.reply
			b.mu.Unlock()
			if reply != nil {
				return reply(model, prompt)
			}
			if strings.HasPrefix(prompt, "Classify the product") {
				return "Category: Home & Garden > Kitchen >  Cookware\n"
			}
			return aiprovider.DefaultReply(model, prompt)
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(b.sb)
	t.Cleanup(srv.Close)
	b.srvURL = srv.URL
	b.client, err = ai.New(ai.Config{BaseURL: srv.URL, APIKey: aiKey, Logger: discard})
	require.NoError(t, err)
	b.store, err = storage.NewLocal(storage.LocalConfig{Dir: b.dir, Logger: discard})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.store.Close() })
	b.h = b.handler(t, b.client)
	return b
}

func (b *bundle) handler(t *testing.T, provider port.AIProvider) *Handler {
	t.Helper()
	h, err := New(Config{
		Deps:     b.Deps,
		Tasks:    postgres.NewAITasks(),
		Products: postgres.Products{},
		Ledger:   postgres.AILedger{},
		Provider: provider,
		Storage:  b.store,
	})
	require.NoError(t, err)
	return h
}

// seedTask creates a product, an operation and a pending AI task of kind, as app_user.
func (b *bundle) seedTask(t *testing.T, kind, instruction string) (domain.AITask, domain.Product) {
	t.Helper()
	now := time.Now()
	product, err := domain.NewProduct(uuid.New(), b.Workspace, domain.ProductContent{Title: "Cast iron skillet 28 cm",
		Description: "Pre-seasoned, oven safe to 260 °C.", Price: "39.90", Currency: "EUR"}, now)
	require.NoError(t, err)
	b.InTx(t, func(ctx context.Context) error { return postgres.Products{}.Insert(ctx, product) })
	id := uuid.New()
	op := domain.NewOperation(b.Workspace, b.User, "ai_task", "ai_task", id, now)
	task, err := domain.NewAITask(id, b.Workspace, op.ID, kind, product, instruction, now)
	require.NoError(t, err)
	workertest.InsertTask(t, b.Env, postgres.NewAITasks(), op, task)
	return task, product
}

func (b *bundle) job(t *testing.T, task domain.AITask) worker.Job {
	return b.Job(t, domain.AITaskRequested{AITaskID: task.ID, OperationID: task.OperationID, Kind: task.Kind, ProductID: task.ProductID}, 1, false)
}

func (b *bundle) load(t *testing.T, id uuid.UUID) (domain.AITask, domain.Operation) {
	t.Helper()
	task := workertest.Load(t, b.Env, postgres.NewAITasks(), id)
	return task, b.Operation(t, task.OperationID)
}

type ledgerRow struct {
	model                   string
	prompt, completion, img int
}

func (b *bundle) ledger(t *testing.T, id uuid.UUID) []ledgerRow {
	t.Helper()
	rows, err := b.DB.Owner.Query(context.Background(),
		`SELECT model, prompt_tokens, completion_tokens, images FROM ai_usage_ledger WHERE ai_task_id = $1`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledgerRow, error) {
		var l ledgerRow
		return l, r.Scan(&l.model, &l.prompt, &l.completion, &l.img)
	})
	require.NoError(t, err)
	return out
}

// objects lists the stored object files.
func (b *bundle) objects(t *testing.T) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(filepath.Join(b.dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	}))
	return out
}

func (b *bundle) chatExecutions() int { return b.sb.Executions(aiprovider.EndpointChat) }

func TestTextHappyPathAndRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "Two sentences, friendly tone.")
	job := b.job(t, task)

	require.NoError(t, b.h.Handle(ctx, job))

	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	var out map[string]string
	require.NoError(t, json.Unmarshal(got.Output, &out))
	require.Len(t, out, 1)
	require.True(t, strings.HasPrefix(out["text"], "Sandbox reply (gpt-4o-mini): Two sentences, friendly tone."), out["text"])
	require.Contains(t, out["text"], "Cast iron skillet")
	require.Equal(t, "chatcmpl-sbx-000001", got.ProviderRequestID)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.JSONEq(t, `{"ai_task_id":"`+task.ID.String()+`"}`, string(op.Result))
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
	rows := b.ledger(t, task.ID)
	require.Len(t, rows, 1)
	require.Equal(t, "gpt-4o-mini", rows[0].model)
	require.Positive(t, rows[0].prompt)
	require.Positive(t, rows[0].completion)
	require.Equal(t, 1, b.chatExecutions())

	// Redelivery after success: no second provider call, still one ledger row.
	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	again, opAgain := b.load(t, task.ID)
	require.Equal(t, got, again)
	require.Equal(t, op.Version, opAgain.Version)
	require.Equal(t, 1, b.sb.Calls(aiprovider.EndpointChat))
	require.Len(t, b.ledger(t, task.ID), 1)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))

	logs := b.Logs.String()
	require.NotContains(t, logs, "Cast iron")
	require.NotContains(t, logs, "friendly tone")
	require.NotContains(t, logs, aiKey)
}

func TestCategory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task, _ := b.seedTask(t, domain.AIKindCategory, "")
	require.NoError(t, b.h.Handle(context.Background(), b.job(t, task)))
	got, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.JSONEq(t, `{"category":"Home & Garden > Kitchen > Cookware"}`, string(got.Output))
	require.Len(t, b.ledger(t, task.ID), 1)
}

func TestCrashAfterProviderCallBeforeRecording(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "")

	// The earlier delivery reached the provider with the task's key, then died before
	// recording anything.
	first, err := b.client.CompleteText(ctx, task.ID.String(), "", prompt(task))
	require.NoError(t, err)
	require.Equal(t, 1, b.chatExecutions())

	require.NoError(t, b.h.Handle(ctx, b.job(t, task)))
	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, first.ProviderRequestID, got.ProviderRequestID)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, 1, b.chatExecutions(), "one billed call")
	require.Equal(t, 1, b.sb.Stats().Replays)
	rows := b.ledger(t, task.ID)
	require.Len(t, rows, 1)
	require.Equal(t, first.Usage.PromptTokens, rows[0].prompt)
	require.Equal(t, first.Usage.CompletionTokens, rows[0].completion)
}

func TestProviderAnsweredButReplyLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "")
	job := b.job(t, task)

	// The provider runs the model, then the answer is lost (a 502 after the effect).
	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusBadGateway, AfterEffect: true})
	err := b.h.Handle(ctx, job)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err))
	mid, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskRunning, mid.Status)
	require.Empty(t, b.ledger(t, task.ID))

	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	got, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 2, got.Attempts)
	require.Equal(t, 1, b.chatExecutions())
	require.Len(t, b.ledger(t, task.ID), 1)
}

func TestProvider5xxThenSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "")
	job := b.job(t, task)

	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusServiceUnavailable})
	err := b.h.Handle(ctx, job)
	require.ErrorIs(t, err, port.ErrAITransient)
	require.False(t, worker.IsPermanent(err))
	mid, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskRunning, mid.Status)
	require.Equal(t, domain.OperationRunning, op.Status)

	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, 2, b.sb.Calls(aiprovider.EndpointChat))
	require.Equal(t, 1, b.chatExecutions())
	require.Len(t, b.ledger(t, task.ID), 1)
	require.Equal(t, []string{"succeeded"}, b.StatusEvents(t, op.ID))
}

func TestRateLimitedIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task, _ := b.seedTask(t, domain.AIKindCategory, "")
	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusTooManyRequests})
	err := b.h.Handle(context.Background(), b.job(t, task))
	require.ErrorIs(t, err, port.ErrAIRateLimited)
	require.False(t, worker.IsPermanent(err))
	got, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskRunning, got.Status)
}

func TestPermanentRejectionFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindText, "")
	job := b.job(t, task)

	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusBadRequest})
	err := b.h.Handle(ctx, job) // the first attempt of many, failed at once
	require.True(t, worker.IsPermanent(err))
	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "AI_PROVIDER_REJECTED", got.ErrorCode)
	require.Equal(t, port.ErrAIRejected.Message, got.ErrorMessage)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "AI_PROVIDER_REJECTED", op.ErrorCode)
	require.NotContains(t, op.ErrorMessage, "injected")
	require.Equal(t, []string{"failed"}, b.StatusEvents(t, op.ID))
	rows := b.ledger(t, task.ID)
	require.Len(t, rows, 1, "one ledger row per task, also a failed one")
	require.Zero(t, rows[0].prompt+rows[0].completion+rows[0].img)

	// Redelivery of a failed task: nothing.
	calls := b.sb.Calls(aiprovider.EndpointChat)
	require.NoError(t, b.h.Handle(ctx, job))
	require.Equal(t, calls, b.sb.Calls(aiprovider.EndpointChat))
	require.Len(t, b.ledger(t, task.ID), 1)
}

func TestLastAttemptRecordsFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	task, _ := b.seedTask(t, domain.AIKindText, "")
	job := b.job(t, task)
	job.Attempt, job.LastAttempt = 3, true
	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: http.StatusInternalServerError})
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), job)))
	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "AI_PROVIDER_UNAVAILABLE", got.ErrorCode)
	require.Equal(t, "AI_PROVIDER_UNAVAILABLE", op.ErrorCode)
	require.Len(t, b.ledger(t, task.ID), 1)
}

func TestServiceKeyRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad, err := ai.New(ai.Config{BaseURL: b.srvURL, APIKey: "sk-wrong", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	h := b.handler(t, bad)
	task, _ := b.seedTask(t, domain.AIKindText, "")
	require.True(t, worker.IsPermanent(h.Handle(context.Background(), b.job(t, task))))
	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "AI_PROVIDER_UNAUTHORIZED", op.ErrorCode)
	require.Equal(t, "the task failed", op.ErrorMessage)
}

func TestUnusableAnswerIsBilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mu.Lock()
	b.reply = func(string, string) string { return "  \n > \n" }
	b.mu.Unlock()
	task, _ := b.seedTask(t, domain.AIKindCategory, "")
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), b.job(t, task))))
	got, _ := b.load(t, task.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "AI_OUTPUT_UNUSABLE", got.ErrorCode)
	rows := b.ledger(t, task.ID)
	require.Len(t, rows, 1)
	require.Positive(t, rows[0].prompt, "the provider billed the call: the ledger says so")
}

func TestImageStoresOneObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, _ := b.seedTask(t, domain.AIKindImage, "")
	job := b.job(t, task)

	// The first delivery's answer is lost after the provider generated the image.
	b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointImages, Status: http.StatusBadGateway, AfterEffect: true})
	require.Error(t, b.h.Handle(ctx, job))
	job.Attempt = 2
	require.NoError(t, b.h.Handle(ctx, job))
	job.Attempt = 3
	require.NoError(t, b.h.Handle(ctx, job))

	got, op := b.load(t, task.ID)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	var out struct {
		Image struct {
			ContentType string `json:"content_type"`
			Size        int64  `json:"size"`
		} `json:"image"`
	}
	require.NoError(t, json.Unmarshal(got.Output, &out))
	require.Equal(t, "image/png", out.Image.ContentType)
	require.Positive(t, out.Image.Size)
	require.NotContains(t, string(got.Output), "workspaces/")
	require.NotContains(t, string(op.Result), "workspaces/")

	info, err := b.store.Stat(ctx, ImageKey(b.Workspace, task.ID))
	require.NoError(t, err)
	require.Equal(t, out.Image.Size, info.Size)
	require.Equal(t, "image/png", info.ContentType)
	require.Len(t, b.objects(t), 1)

	require.Equal(t, 1, b.sb.Executions(aiprovider.EndpointImages))
	rows := b.ledger(t, task.ID)
	require.Len(t, rows, 1)
	require.Equal(t, 1, rows[0].img)
	require.Equal(t, "gpt-image-1", rows[0].model)
}

func TestUnknownTaskIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.job(t, domain.AITask{Task: domain.Task{ID: uuid.New()}})
	err := b.h.Handle(context.Background(), job)
	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, domain.ErrAITaskNotFound)
	job.Payload = json.RawMessage(`[]`)
	require.True(t, worker.IsPermanent(b.h.Handle(context.Background(), job)))
	require.Zero(t, b.sb.Calls(aiprovider.EndpointChat))
}

func TestImageKeyIsDeterministic(t *testing.T) {
	ws, id := uuid.New(), uuid.New()
	require.Equal(t, ImageKey(ws, id), ImageKey(ws, id))
	require.Equal(t, "workspaces/"+ws.String()+"/ai-tasks/"+id.String()+"/image", ImageKey(ws, id))
	require.NoError(t, storage.ValidateKey(ImageKey(ws, id)))
}

func TestPromptIsAPureFunction(t *testing.T) {
	p := &domain.ProductSnapshot{Revision: 3, Title: "Mug", Description: strings.Repeat("é", 5000)}
	task := func(kind, instruction string) domain.AITask {
		return domain.AITask{Task: domain.Task{ID: uuid.New()}, Kind: kind, ProductID: uuid.New(), Prompt: instruction, Snapshot: p}
	}
	for _, kind := range []string{domain.AIKindText, domain.AIKindCategory, domain.AIKindImage} {
		a, b := prompt(task(kind, " make it short ")), prompt(task(kind, "make it short"))
		require.Equal(t, a, b)
		require.Contains(t, a, "Product title: Mug")
		require.Less(t, len([]rune(a)), 4600)
	}
	require.Contains(t, prompt(task(domain.AIKindText, "")), defaultTextInstruction)
	require.Contains(t, prompt(task(domain.AIKindImage, "")), defaultImageInstruction)
}

func TestCategoryParsing(t *testing.T) {
	for in, want := range map[string]string{
		"Home & Garden > Kitchen > Cookware":          "Home & Garden > Kitchen > Cookware",
		"Category: Home>Kitchen\nbecause it is a pan": "Home > Kitchen",
		"\n\n\"Sports  >  Outdoor\".":                 "Sports > Outdoor",
		"**Electronics > Audio > Headphones**":        "Electronics > Audio > Headphones",
		"":                                            "",
		" > \n":                                       "",
		"Toys":                                        "Toys",
		"category:   Books > Fiction > Science Fiction": "Books > Fiction > Science Fiction",
	} {
		require.Equal(t, want, category(in), "%q", in)
	}
	require.Len(t, []rune(category(strings.Repeat("x", 2000))), MaxCategoryLength)
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{})
	require.Error(t, err)
}
