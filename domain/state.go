package domain

import "slices"

// A State is a status a flow gives an aggregate besides the aggregate's own (a store's
// disconnected), declared once, in the flow's domain file (DeclareState), so that no file
// of the aggregate is edited for the flow. The aggregate's status is open text: the flow's
// migration allows the value (the table's CHECK), the API shows it as stored. The engine
// reads the declarations: the aggregate's repository reads and writes the state's Since
// column (NULL unless the aggregate is in the state), and the API shows it under the
// column's name. What the state forbids other flows is a guard (sql/060_task_guards.sql),
// which a command checking the aggregate asks before its own checks.
type State struct {
	// Aggregate is the aggregate's table (stores); Status the value of its status column
	// (disconnected).
	Aggregate, Status string
	// Since is the column holding when the aggregate entered the state (disconnected_at):
	// NULL in any other status.
	Since string
}

// states are the declared states (DeclareState).
var states []State

// DeclareState declares s (at package initialization); it panics when the aggregate's status
// or column is declared twice. It returns s.
func DeclareState(s State) State {
	if s.Aggregate == "" || s.Status == "" || s.Since == "" {
		panic("domain.DeclareState: an aggregate, a status and a Since column are required")
	}
	for _, o := range states {
		if o.Aggregate == s.Aggregate && (o.Status == s.Status || o.Since == s.Since) {
			panic("domain.DeclareState: " + s.Aggregate + " " + s.Status + " declared twice")
		}
	}
	states = append(states, s)
	return s
}

// States lists the states declared of aggregate, in their order of declaration.
func States(aggregate string) []State {
	return slices.DeleteFunc(slices.Clone(states), func(s State) bool { return s.Aggregate != aggregate })
}
