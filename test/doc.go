// Package test holds the end-to-end and fault-injection suites that run the
// real binary against the real broker and database. Its subpackages are the
// helpers every real-stack test uses: stacktest finds (or starts) the
// services, pgtest gives a test its own migrated schema, kafkatest its own
// topics and group.
package test
