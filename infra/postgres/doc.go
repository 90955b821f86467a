// Package postgres is the PostgreSQL adapter: the connection pool of the service's non-owner
// role (app_user), the one RLS transaction helper every write and every worker step goes
// through, the command-bus middleware that opens it, migrations, and the translation of
// PostgreSQL errors into domain errors.
//
// Row-Level Security: every transaction that touches workspace data sets app.workspace_id (and
// app.user_id) with set_config(…, true), so the setting dies with the transaction and a pooled
// connection never carries one tenant's context into another's work. Without a workspace
// context, workspace tables read as empty and refuse writes.
package postgres
