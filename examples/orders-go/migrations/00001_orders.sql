-- The orders example's tables, applied by `orders migrate` after the
-- engine's migrations, with their own version table (orders_schema_version).

-- +goose Up

-- Absolute, version-gated state: one row per order, set (never patched) by
-- order.placed, order.updated and order.cancelled; the highest
-- resourceversion wins, whatever order the events arrive in.
CREATE TABLE orders (
    id          text        NOT NULL PRIMARY KEY,
    version     bigint      NOT NULL CHECK (version >= 1),
    customer    text        NOT NULL,
    total_cents bigint      NOT NULL CHECK (total_cents >= 0),
    status      text        NOT NULL CHECK (status IN ('open', 'cancelled')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Relative facts, one row per event key: an order.line_added adds a line,
-- and a redelivery (or a replay after its claim expired) adds nothing. The
-- engine parks a line until its order exists, so the foreign key holds.
CREATE TABLE order_lines (
    event_key        text        NOT NULL PRIMARY KEY,
    order_id         text        NOT NULL REFERENCES orders (id),
    line_id          text        NOT NULL,
    sku              text        NOT NULL,
    quantity         integer     NOT NULL CHECK (quantity > 0),
    unit_price_cents bigint      NOT NULL CHECK (unit_price_cents >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_lines_order_idx ON order_lines (order_id);

-- +goose Down
DROP TABLE order_lines;
DROP TABLE orders;
