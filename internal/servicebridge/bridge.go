// Package servicebridge carries what the test kit (package
// effectivelytest) needs of an App — its migration sets and the worker's
// pipeline — without making it part of package service's API. Package
// service installs the functions in its init.
package servicebridge

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/schema"
)

var (
	// SchemaSets returns a *service.App's migration sets for cfg: the
	// build's, then one per directory of postgres.migrations.
	SchemaSets func(app any, cfg config.Config) []schema.Set
	// Applier returns the pipeline a worker of a *service.App applies
	// batches with, on pool (its tables checked, its key strategies
	// recorded), as `run` builds it.
	Applier func(ctx context.Context, app any, cfg config.Config, pool *pgxpool.Pool, log *zap.Logger) (*pipeline.Applier, error)
)
