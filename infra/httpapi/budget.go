package httpapi

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// This file is the workspace budget (Config.WorkspaceRateLimit): every request of a member
// under /v1/workspaces/{workspace_id} (requireMember) and every command a workspace's
// integrations send as messages (ExecuteMessage) takes one token of the workspace's bucket,
// shared by every API process. A stranger's request never reaches a workspace's budget: it
// is taken once membership (or the message's signature) is established.

// workspaceBucket is the key of workspace ws's bucket in Deps.WorkspaceBuckets.
func workspaceBucket(ws uuid.UUID) string { return "workspace:" + ws.String() }

// takeWorkspaceBudget takes one token of ws's budget: nil when taken or when there is no
// budget; over budget, domain.ErrRateLimited with the wait as its Retry-After. A bucket that
// cannot be reached (Redis down) lets the request through, logged: the budget shields the
// service from one workspace's excess, it is not what keeps a request correct.
func (s *Server) takeWorkspaceBudget(ctx context.Context, ws uuid.UUID) error {
	if s.deps.WorkspaceBuckets == nil || s.cfg.WorkspaceRateLimit.IsZero() {
		return nil
	}
	wait, err := s.deps.WorkspaceBuckets.Take(ctx, workspaceBucket(ws), s.cfg.WorkspaceRateLimit, 1)
	switch {
	case err != nil:
		loggerFrom(ctx).WarnContext(ctx, "workspace budget unavailable; request let through", "workspace_id", ws.String(), "error", err)
		return nil
	case wait > 0:
		return domain.ErrRateLimited.WithMessage("the workspace is over its request budget; retry later").WithRetryAfter(wait)
	}
	return nil
}
