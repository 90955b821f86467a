package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

type aiTaskJSON struct {
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	ProductID string            `json:"product_id"`
	Input     map[string]string `json:"input"`
	Status    string            `json:"status"`
	Output    json.RawMessage   `json:"output"`
	Error     *worker.ErrorJSON `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

func aiTaskBody(t domain.AITask) aiTaskJSON {
	out := aiTaskJSON{ID: t.ID.String(), Kind: t.Kind, ProductID: t.ProductID.String(), Input: map[string]string{"prompt": t.Prompt},
		Status: string(t.Status), Output: t.Output, Error: worker.TaskError(t.Task), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()}
	if len(out.Output) == 0 {
		out.Output = json.RawMessage("null")
	}
	return out
}

// createAITaskIn is listing.create_ai_task's body.
type createAITaskIn struct {
	Kind      string `json:"kind"`
	ProductID string `json:"product_id"`
	Input     struct {
		Prompt string `json:"prompt"`
	} `json:"input"`
}

// createAITaskCommand is listing.create_ai_task: text or an image made for a product.
func (s *Server) createAITaskCommand() Command {
	return Command{Type: "listing.create_ai_task",
		Run: Runs(s.app.Bus, s.app.Commands.CreateAITask, func(_ context.Context, c Call, in createAITaskIn) (commands.CreateAITask, error) {
			pid, err := uuid.Parse(in.ProductID)
			if err != nil {
				return commands.CreateAITask{}, domain.Invalid("product_id", "must be a product id")
			}
			return commands.CreateAITask{TaskID: domain.NewID(), WorkspaceID: c.Actor.WorkspaceID, UserID: c.Actor.UserID,
				Kind: in.Kind, ProductID: pid, Prompt: in.Input.Prompt}, nil
		}, startRender(http.StatusAccepted, "ai_task", func(v domain.AITask) any { return aiTaskBody(v) }))}
}

func (s *Server) listAITasks(w http.ResponseWriter, r *http.Request) {
	getList(s, w, r, s.app.Queries.AITasks, func(v domain.AITask) any { return aiTaskBody(v) })
}

func (s *Server) getAITask(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "ai_task_id", domain.ErrAITaskNotFound, s.app.Queries.AITasks, "ai_task",
		func(v domain.AITask) any { return aiTaskBody(v) })
}
