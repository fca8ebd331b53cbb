// Package cli adds the reference domain's commands to a build: the
// workload generator behind `produce --events N` and `verify`, which
// compares the database with the generated workload's expected end state.
package cli
