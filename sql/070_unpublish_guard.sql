-- Unpublish's rule as a declared guard (060_task_guards.sql): from the moment an unpublish is
-- accepted, no other task of the publication starts or runs; each is refused
-- PUBLICATION_UNPUBLISHED (a listing update: at acceptance, and in its begin step when it was
-- accepted before the unpublish). The pending unpublish is on the publication:
-- publications.unpublish_id is set in the unpublish's own transaction (its insert) and
-- cleared when it fails or is cancelled (the publication stays published, and may be updated
-- or unpublished again); a succeeded unpublish keeps it, beside unpublished_at. The guard
-- reads the publication's row under its lock, so the answer does not depend on when the
-- other request arrives. A second unpublish is refused by unpublishes_one (035, 056).
-- Republishing the product to the store is not a task of this publication: it stays refused
-- PRODUCT_ALREADY_PUBLISHED until the unpublish succeeded (publications_first_published).

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE publications ADD COLUMN unpublish_id uuid;

-- +goose StatementBegin
CREATE FUNCTION unpublishes_mark() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    UPDATE publications SET unpublish_id = NEW.id WHERE id = NEW.publication_id;
  ELSE
    UPDATE publications SET unpublish_id = NULL WHERE id = NEW.publication_id AND unpublish_id = NEW.id;
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION unpublishes_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION unpublishes_mark() TO app_user;
CREATE TRIGGER unpublishes_mark AFTER INSERT ON unpublishes
  FOR EACH ROW EXECUTE FUNCTION unpublishes_mark();
CREATE TRIGGER unpublishes_unmark AFTER UPDATE OF status ON unpublishes
  FOR EACH ROW WHEN (NEW.status IN ('failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION unpublishes_mark();

-- The unpublishes accepted before this migration and not failed or cancelled: every
-- workspace's rows, the owner's forced RLS relaxed for this transaction only, under the lock.
LOCK TABLE publications IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE unpublishes IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE publications NO FORCE ROW LEVEL SECURITY;
ALTER TABLE unpublishes NO FORCE ROW LEVEL SECURITY;
UPDATE publications p SET unpublish_id = u.id FROM unpublishes u
  WHERE u.publication_id = p.id AND u.status NOT IN ('failed', 'cancelled');
ALTER TABLE unpublishes FORCE ROW LEVEL SECURITY;
ALTER TABLE publications FORCE ROW LEVEL SECURITY;

INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code, except_table)
VALUES ('publication not unpublished', 'publications', 'publication_id',
  $$a.unpublish_id IS NULL AND a.unpublished_at IS NULL$$, 'PUBLICATION_UNPUBLISHED', 'unpublishes');
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DELETE FROM task_guards WHERE name = 'publication not unpublished';
DROP TRIGGER IF EXISTS unpublishes_unmark ON unpublishes;
DROP TRIGGER IF EXISTS unpublishes_mark ON unpublishes;
DROP FUNCTION IF EXISTS unpublishes_mark();
ALTER TABLE publications DROP COLUMN IF EXISTS unpublish_id;
RESET ROLE;
