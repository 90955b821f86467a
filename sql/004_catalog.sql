-- Products: listing drafts with a revision for If-Match.

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE products (
  id           uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  title        text NOT NULL,
  description  text NOT NULL DEFAULT '',
  price        numeric(16, 4) NOT NULL CHECK (price >= 0),
  price_text   text NOT NULL,
  currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  images       jsonb NOT NULL DEFAULT '[]',
  revision     int NOT NULL DEFAULT 1 CHECK (revision >= 1),
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX products_list ON products (workspace_id, created_at DESC, id DESC);
ALTER TABLE products ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY products_tenant ON products
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

RESET ROLE;

-- +goose Down
DROP TABLE IF EXISTS products;
