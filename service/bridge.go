package service

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/servicebridge"
	"github.com/effectively-io/effectively/schema"
)

// The test kit builds the worker's pipeline as run does (see
// internal/servicebridge).
func init() {
	servicebridge.SchemaSets = func(app any, cfg config.Config) []schema.Set { return app.(*App).schemaSets(cfg) }
	servicebridge.Applier = func(ctx context.Context, app any, cfg config.Config, pool *pgxpool.Pool, log *zap.Logger) (*pipeline.Applier, error) {
		return app.(*App).newApplier(ctx, cfg, pool, log, nil, nil)
	}
}
