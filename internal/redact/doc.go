// Package redact hides credentials in URLs, DSNs and the texts that carry
// them (errors, log lines) before they are printed, logged or stored.
//
// In a URL it hides:
//   - the userinfo: the password of user:password@, and a user given alone
//     (https://TOKEN@host/, a token used as the user name) except in
//     postgres:// URLs, where a lone user is a role name;
//   - the value of every query (or fragment) parameter whose name is a
//     credential's (see [SecretParam]) or one of [Policy.Params];
//   - the path segments after a secret prefix ([PathRule]): Slack's
//     /services/T…/B…/… on any host, Discord's /api/webhooks/ and
//     Telegram's bot paths by default ([DefaultPaths]), and the
//     prefixes a deployment declares;
//   - password= and sslpassword= of a libpq keyword/value DSN.
//
// Hidden values become [Mask]. [URL] redacts one URL, [Text] every URL in a
// free text, [Error] an error's text (a *url.Error keeps its type, with its
// URL redacted). The package-level functions use the process's policy,
// [SetDefault]; a [Policy] value redacts with its own rules. Standard
// library only, so every package that prints a URL can use it.
package redact
