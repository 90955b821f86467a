-- The first-adopter flows: stores and their verifications, media and their
-- processing, material transfers, publications, product syncs with the synced platform
-- products, AI tasks with their billing ledger. Every task table carries status, attempts,
-- version and the external ids that make workers re-entrant. RLS forced everywhere.

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE stores (
  id                  uuid PRIMARY KEY,
  workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  platform            text NOT NULL,
  shop_id             text NOT NULL,
  name                text NOT NULL,
  status              text NOT NULL CHECK (status IN ('pending_verification', 'verified', 'invalid')),
  status_reason       text NOT NULL DEFAULT '',
  shop_name           text NOT NULL DEFAULT '',
  verified_at         timestamptz,
  -- AEAD ciphertext of {"api_key": ...}, bound to (workspace, store) as associated data.
  -- Written by the same transaction that inserts the store (never left empty on commit).
  credentials_sealed  bytea NOT NULL DEFAULT '\x',
  credentials_key_id  text NOT NULL DEFAULT '',
  credentials_version int NOT NULL DEFAULT 1,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT stores_shop UNIQUE (workspace_id, platform, shop_id)
);
CREATE INDEX stores_list ON stores (workspace_id, created_at DESC, id DESC);

-- The common columns of every domain task.
CREATE TABLE store_verifications (
  id                  uuid PRIMARY KEY,
  workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id        uuid NOT NULL REFERENCES operations (id),
  status              text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts            int NOT NULL DEFAULT 0,
  error_code          text NOT NULL DEFAULT '',
  error_message       text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version             int NOT NULL DEFAULT 1,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  store_id            uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  credentials_version int NOT NULL,
  valid               boolean
);
CREATE INDEX store_verifications_store ON store_verifications (workspace_id, store_id, created_at DESC);

CREATE TABLE media (
  id            uuid PRIMARY KEY,
  workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  filename      text NOT NULL,
  content_type  text NOT NULL,
  size          bigint NOT NULL CHECK (size > 0),
  status        text NOT NULL CHECK (status IN ('awaiting_upload', 'processing', 'ready', 'rejected')),
  source        text NOT NULL CHECK (source IN ('upload', 'transfer')),
  sniffed_type  text NOT NULL DEFAULT '',
  width         int NOT NULL DEFAULT 0,
  height        int NOT NULL DEFAULT 0,
  variants      jsonb NOT NULL DEFAULT '[]',
  reject_reason text NOT NULL DEFAULT '',
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX media_list ON media (workspace_id, created_at DESC, id DESC);

CREATE TABLE media_processings (
  id            uuid PRIMARY KEY,
  workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id  uuid NOT NULL REFERENCES operations (id),
  status        text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts      int NOT NULL DEFAULT 0,
  error_code    text NOT NULL DEFAULT '',
  error_message text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version       int NOT NULL DEFAULT 1,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  media_id      uuid NOT NULL REFERENCES media (id) ON DELETE CASCADE
);
-- A media is completed (and processed) once.
CREATE UNIQUE INDEX media_processings_media ON media_processings (media_id);

CREATE TABLE material_transfers (
  id            uuid PRIMARY KEY,
  workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id  uuid NOT NULL REFERENCES operations (id),
  status        text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts      int NOT NULL DEFAULT 0,
  error_code    text NOT NULL DEFAULT '',
  error_message text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version       int NOT NULL DEFAULT 1,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  source_url    text NOT NULL CHECK (length(source_url) <= 2048),
  media_id      uuid NOT NULL UNIQUE,
  bytes         bigint NOT NULL DEFAULT 0,
  stored        boolean NOT NULL DEFAULT false
);
CREATE INDEX material_transfers_list ON material_transfers (workspace_id, created_at DESC, id DESC);

CREATE TABLE publications (
  id                  uuid PRIMARY KEY,
  workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id        uuid NOT NULL REFERENCES operations (id),
  status              text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts            int NOT NULL DEFAULT 0,
  error_code          text NOT NULL DEFAULT '',
  error_message       text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version             int NOT NULL DEFAULT 1,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  product_id          uuid NOT NULL REFERENCES products (id) ON DELETE CASCADE,
  store_id            uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  product_revision    int NOT NULL,
  external_product_id text NOT NULL DEFAULT ''
);
-- One first publication per product and store: a failed one may be retried by a new request.
CREATE UNIQUE INDEX publications_first ON publications (product_id, store_id) WHERE status <> 'failed';
CREATE INDEX publications_list ON publications (workspace_id, created_at DESC, id DESC);

CREATE TABLE product_syncs (
  id              uuid PRIMARY KEY,
  workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id    uuid NOT NULL REFERENCES operations (id),
  status          text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts        int NOT NULL DEFAULT 0,
  error_code      text NOT NULL DEFAULT '',
  error_message   text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version         int NOT NULL DEFAULT 1,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  store_id        uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  next_page_token text NOT NULL DEFAULT '',
  pages_done      int NOT NULL DEFAULT 0,
  items_synced    int NOT NULL DEFAULT 0
);
-- One active sync per store.
CREATE UNIQUE INDEX product_syncs_active ON product_syncs (store_id) WHERE status IN ('pending', 'running');
CREATE INDEX product_syncs_list ON product_syncs (workspace_id, store_id, created_at DESC, id DESC);

CREATE TABLE platform_products (
  workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  store_id      uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  external_id   text NOT NULL,
  external_ref  text NOT NULL DEFAULT '',
  title         text NOT NULL DEFAULT '',
  price         text NOT NULL DEFAULT '',
  currency      text NOT NULL DEFAULT '',
  last_sync_id  uuid NOT NULL,
  synced_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (store_id, external_id)
);
CREATE INDEX platform_products_ws ON platform_products (workspace_id, store_id);

CREATE TABLE ai_tasks (
  id                  uuid PRIMARY KEY,
  workspace_id        uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id        uuid NOT NULL REFERENCES operations (id),
  status              text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts            int NOT NULL DEFAULT 0,
  error_code          text NOT NULL DEFAULT '',
  error_message       text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version             int NOT NULL DEFAULT 1,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  kind                text NOT NULL CHECK (kind IN ('text', 'category', 'image')),
  product_id          uuid NOT NULL REFERENCES products (id) ON DELETE CASCADE,
  prompt              text NOT NULL DEFAULT '',
  output              jsonb,
  provider_request_id text NOT NULL DEFAULT ''
);
CREATE INDEX ai_tasks_list ON ai_tasks (workspace_id, created_at DESC, id DESC);

-- Billing: one row per AI task, always (the primary key is the task).
CREATE TABLE ai_usage_ledger (
  ai_task_id        uuid PRIMARY KEY REFERENCES ai_tasks (id) ON DELETE CASCADE,
  workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  kind              text NOT NULL,
  model             text NOT NULL DEFAULT '',
  prompt_tokens     int NOT NULL DEFAULT 0,
  completion_tokens int NOT NULL DEFAULT 0,
  images            int NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['stores', 'store_verifications', 'media', 'media_processings',
    'material_transfers', 'publications', 'product_syncs', 'platform_products', 'ai_tasks', 'ai_usage_ledger']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY %I ON %I USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id())', t || '_tenant', t);
  END LOOP;
END
$$;
-- +goose StatementEnd

RESET ROLE;

-- +goose Down
DROP TABLE IF EXISTS ai_usage_ledger, ai_tasks, platform_products, product_syncs, publications,
  material_transfers, media_processings, media, store_verifications, stores;
