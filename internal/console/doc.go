// Package console is the operations console in the browser: server-rendered
// pages (html/template, embedded assets, no script beyond one small file)
// of what the group is doing — the data of `effectively status`, the
// throughput by disposition over the last hour, dead letters, parked
// events, outbox intents, a replay planner, an audit of a topic range — and
// the actions of the CLI's commands (redrive, release, drop, resolve,
// retry, replay), each calling the same code as its command and recorded in
// the operator-action log (table operator_actions).
//
// Every route requires a signed-in session (a token from
// console.token_file; the token's name is the operator the log records),
// unless the console runs on a loopback address and
// console.localhost_without_token allows it. Failed sign-ins are limited
// per client address and in all (429 with Retry-After); the session cookie
// is HttpOnly, SameSite=Strict and Secure over TLS or with
// console.cookie_secure; a sign-in returns only to a clean path under
// /console/. Without a token, and with a token when console.allowed_hosts
// is set, a request must name a loopback host on the console's own port or
// an allowed host, else it is refused with 421 before anything runs (DNS
// rebinding). Every POST passes Go's cross-origin protection
// (Sec-Fetch-Site, Origin) and carries the session's CSRF token. Responses
// carry a CSP without inline script, and deny framing and sniffing.
//
// The console is mounted by the worker's admin server only when
// console.enabled is true; off, no route of it exists.
package console
