-- +goose Up
-- The catalog's products at their newest version, and one row per version
-- seen (its price then).
CREATE TABLE products (
    sku        text PRIMARY KEY,
    version    bigint NOT NULL,
    name       text NOT NULL,
    price      numeric(12,2) NOT NULL,
    updated_at timestamptz NOT NULL,
    launch     date NOT NULL,
    color      text
);
CREATE TABLE product_events (
    event_key text PRIMARY KEY,
    sku       text NOT NULL,
    version   bigint NOT NULL,
    price     numeric(12,2) NOT NULL
);

-- +goose Down
DROP TABLE product_events;
DROP TABLE products;
