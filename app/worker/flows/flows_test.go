package flows

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/listingupdate"
	"github.com/listingkit/listing/domain"
)

func TestRegistryIsWhole(t *testing.T) {
	require.NoError(t, Validate())
	require.Len(t, Queues(), len(all))
	for _, s := range all {
		require.Equal(t, s.Queue, Routes()[s.Request.EventType()], s.Name)
		got, ok := ByQueue(s.Queue)
		require.True(t, ok)
		require.Equal(t, s.Name, got.Name)
	}
}

// A flow that lacks a part is refused, and the error names the flow and the part.
func TestCheckNamesTheMissingPart(t *testing.T) {
	base := listingupdate.Flow.Spec
	require.NoError(t, base.Check())
	cases := []struct {
		part   string
		mutate func(*worker.Spec)
	}{
		{"no queue", func(s *worker.Spec) { s.Queue = "" }},
		{"no task table", func(s *worker.Spec) { s.Table = "" }},
		{"no request event", func(s *worker.Spec) { s.Request = nil }},
		{"request event unregistered.requested not registered", func(s *worker.Spec) { s.Request = unregistered{} }},
		{`has no field "nope"`, func(s *worker.Spec) { s.TaskIDField = "nope" }},
		{"no aggregate column", func(s *worker.Spec) { s.AggregateColumn = "" }},
		{"no not-found error", func(s *worker.Spec) { s.NotFound = nil }},
		{"not of KindNotFound", func(s *worker.Spec) { s.NotFound = domain.ErrStoreNotVerified }},
		{"no operation type", func(s *worker.Spec) { s.Operation = "" }},
		{"no last look, nor a statement that the upstream cannot be asked", func(s *worker.Spec) { s.LastLook = worker.LastLook{} }},
		{"both a last look and a statement", func(s *worker.Spec) { s.LastLook.Asks = "find it" }},
		{`a command type "update" outside listing.*`, func(s *worker.Spec) { s.Messages = []worker.Message{{Type: "update", Method: "POST", Path: "/x"}} }},
		{"command type listing.x: no endpoint", func(s *worker.Spec) { s.Messages = []worker.Message{{Type: "listing.x"}} }},
		{"a task resource without its parent", func(s *worker.Spec) { r := *s.Resource; r.Parent = "/publications"; s.Resource = &r }},
		{"a task resource without Path, IDParam, Key, GetOperation, ListOperation or Body", func(s *worker.Spec) {
			r := *s.Resource
			r.Body = nil
			s.Resource = &r
		}},
	}
	for _, c := range cases {
		t.Run(c.part, func(t *testing.T) {
			s := base
			c.mutate(&s)
			err := s.Check()
			require.ErrorContains(t, err, "flow "+base.Name+": ")
			require.ErrorContains(t, err, c.part)
		})
	}
}

// Two flows may not share a queue, a table, a request event, an operation or a command type.
func TestValidateRefusesSharedParts(t *testing.T) {
	a, b := all[0], all[1]
	b.Queue, b.Table, b.Operation = a.Queue, a.Table, a.Operation
	b.Messages = slices.Clone(a.Messages)
	err := validate([]worker.Registration{a, b})
	for _, part := range []string{"queue", "table", "operation type", "command type", "command endpoint"} {
		require.ErrorContains(t, err, "flows "+a.Name+" and "+b.Name+": the same "+part)
	}
}

// A process that lacks a flow's task kind or handler does not start; nor one with a kind or
// handler of a queue no flow declares.
func TestCheckAtStartUp(t *testing.T) {
	kinds := map[string]worker.TaskKind{}
	handlers := map[string]worker.Handler{}
	for _, s := range all {
		kinds[s.Queue] = fakeKind{s.Queue}
		handlers[s.Queue] = worker.HandlerFunc(func(context.Context, worker.Job) error { return nil })
	}
	require.NoError(t, Check(kinds, handlers))
	require.NoError(t, Check(kinds, nil))

	last := all[len(all)-1]
	delete(kinds, last.Queue)
	delete(handlers, all[0].Queue)
	handlers["stray"] = handlers[last.Queue]
	err := Check(kinds, handlers)
	require.ErrorContains(t, err, "flow "+last.Name+": no task kind for queue "+last.Queue)
	require.ErrorContains(t, err, "flow "+all[0].Name+": no handler for queue "+all[0].Queue)
	require.ErrorContains(t, err, "queue stray: a handler, but no registered flow")
}

type unregistered struct{}

func (unregistered) EventType() string     { return "unregistered.requested" }
func (unregistered) AggregateType() string { return "x" }
func (unregistered) AggregateID() string   { return "" }

type fakeKind struct{ q string }

func (k fakeKind) Queue() string                                           { return k.q }
func (fakeKind) Abandon(context.Context, worker.Job, worker.Failure) error { return nil }
func (fakeKind) Reconcile(context.Context, port.StuckTask, worker.RedeliveryPolicy) (worker.Reconciled, error) {
	return worker.Unchanged, nil
}
