// Command effectively is the reference build: the engine plus the
// reference domain (examples/accounts), wired only through the public API,
// as a team's own build would be.
package main

import (
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/cli"
	"github.com/effectively-io/effectively/service"
)

// version is set at build time (-ldflags "-X main.version=v1.2.3").
var version = ""

func main() { newApp().Main() }

// newApp is the reference build; its tests generate the reference docs
// from it.
func newApp() *service.App {
	app := service.New("effectively")
	app.Version = version
	accounts.Register(&app.Registry)
	app.Migrations(accounts.Migrations())
	// The reference domain's topic: the default, and the topic its
	// handlers are for. Configured to consume only other topics (a team's
	// config-only sinks), the build leaves the reference domain out.
	app.Topics("accounts")
	// The keys of releases before named targets keep working.
	app.Alias("effects.crm.url", "targets.crm.url")
	app.Alias("effects.mail.url", "targets.mail.url")
	app.Alias("sources.accounts.url", "targets.accounts.url")
	app.Workload(&cli.Workload{})
	app.Command(cli.Verify)
	app.Reasons(accounts.Reasons()...)
	return app
}
