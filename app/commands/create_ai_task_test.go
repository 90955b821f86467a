package commands_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/workertest"
)

// CreateAITask captures the product's current content with the task, in its transaction;
// its event carries ids only. An unknown product stores nothing.
func TestCreateAITaskCapturesTheProductItReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := commands.NewCreateAITaskHandler(b.flow, postgres.Products{}, postgres.NewAITasks())

	var task commands.Started[domain.AITask]
	b.InTx(t, func(ctx context.Context) error {
		var err error
		task, err = h.Handle(ctx, commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
			Kind: domain.AIKindText, ProductID: b.product.ID, Prompt: "short"})
		return err
	})
	require.Equal(t, b.current, task.Resource.Snapshot)
	require.Equal(t, b.current, workertest.Load(t, b.Env, postgres.NewAITasks(), task.Resource.ID).Snapshot)
	b.requireNoProductContentInEvents(t)
	require.Equal(t, 1, b.CountOutbox(t, "ai_task.requested", task.Resource.ID))

	err := postgres.Transactor{Pool: b.DB.App}.InTx(context.Background(), b.Workspace, b.User, func(ctx context.Context) error {
		_, err := h.Handle(ctx, commands.CreateAITask{TaskID: uuid.New(), WorkspaceID: b.Workspace, UserID: b.User,
			Kind: domain.AIKindText, ProductID: uuid.New()})
		return err
	})
	require.ErrorIs(t, err, domain.ErrProductNotFound)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM ai_tasks`))
}
