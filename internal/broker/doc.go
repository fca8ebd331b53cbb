// Package broker builds the franz-go options every Kafka client of
// effectively starts from — the worker's consumer, the dead-letter relay,
// replay, audit, produce and the admin calls — so that seed brokers, TLS
// and SASL are configured in one place and the same way for all of them.
//
// [ClientOpts] turns kafka.* settings into options: TLS with certificate
// verification always on (a CA file, a client certificate for mutual TLS,
// a server name override), and SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
// OAUTHBEARER through franz-go's own mechanisms. Secrets kept in files (the
// password, the OAUTHBEARER token, the client certificate) are read again
// at every authentication or handshake, so a rotated secret applies to the
// next connection without a restart.
//
// [Explain] turns the errors a misconfigured client meets (a rejected
// password, an unknown certificate authority, a missing ACL) into errors
// that name the configuration key or the permission to fix, and
// [CheckAccess] asks the brokers at start-up whether the worker's
// principal holds every ACL it needs, so a missing one is reported before
// the worker joins its group rather than as a stalled partition later.
package broker
