-- outbox_due_workspaces(p_now, p_limit, p_since): discovery of the workspaces with due events
-- whose due time (next_attempt_at) is at least p_since ('-infinity': all of them, as the
-- two-argument form). Both walks of outbox_due (the loose scan over workspaces and the first
-- due entry of each) test p_since on the index entry itself, before visiting the row: the
-- entries of events dispatched while an older snapshot is held (dead, and kept until it
-- ends) that lie below p_since cost an index entry each, not a heap visit. The dispatcher
-- passes the time of its previous discovery, less a margin, and all of them (-infinity) at
-- least once in every FullClaimInterval (infra/outbox, lowwater.go).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION outbox_due_workspaces(p_now timestamptz, p_limit int, p_since timestamptz)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH RECURSIVE ws AS (
    (SELECT o.workspace_id FROM outbox_events o
     WHERE o.status = 'pending' AND o.next_attempt_at >= p_since AND o.next_attempt_at <= p_now
     ORDER BY o.workspace_id LIMIT 1)
    UNION ALL
    SELECT n.workspace_id FROM ws CROSS JOIN LATERAL (
      SELECT o.workspace_id FROM outbox_events o
      WHERE o.status = 'pending' AND o.workspace_id > ws.workspace_id
        AND o.next_attempt_at >= p_since AND o.next_attempt_at <= p_now
      ORDER BY o.workspace_id LIMIT 1) n
  )
  SELECT ws.workspace_id
  FROM ws CROSS JOIN LATERAL (
    SELECT o.next_attempt_at AS due FROM outbox_events o
    WHERE o.workspace_id = ws.workspace_id AND o.status = 'pending'
      AND o.next_attempt_at >= p_since AND o.next_attempt_at <= p_now
      AND (o.locked_until IS NULL OR o.locked_until <= p_now)
    ORDER BY o.next_attempt_at LIMIT 1) d
  ORDER BY d.due, ws.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
ALTER FUNCTION outbox_due_workspaces(timestamptz, int, timestamptz) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION outbox_due_workspaces(timestamptz, int, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_due_workspaces(timestamptz, int, timestamptz) TO app_user;

-- +goose Down
DROP FUNCTION outbox_due_workspaces(timestamptz, int, timestamptz);
