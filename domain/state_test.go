package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A state is declared once: its status or its column twice is refused.
func TestDeclareStateTwice(t *testing.T) {
	saved := states
	t.Cleanup(func() { states = saved })
	s := DeclareState(State{Aggregate: "demo", Status: "paused", Since: "paused_at"})
	require.Equal(t, []State{s}, States("demo"))
	require.Panics(t, func() { DeclareState(State{Aggregate: "demo", Status: "paused", Since: "other_at"}) })
	require.Panics(t, func() { DeclareState(State{Aggregate: "demo", Status: "other", Since: "paused_at"}) })
	require.Panics(t, func() { DeclareState(State{Aggregate: "demo", Status: "other"}) })
}
