// Package config owns the worker's configuration: the [Config] struct and its
// embedded defaults ([Default]), loading it from flags, environment and a YAML
// file ([Load], [BindFlags]), and checking it ([Config.Validate]).
//
// Precedence, highest first: command-line flags the user actually set,
// environment variables, the config file, the defaults. The defaults target the
// local stack that `make stack-up` starts, so a first run needs no
// configuration at all.
//
// Every key has an environment variable: EFFECTIVELY_ followed by the key
// upper-cased with "." replaced by "_" (kafka.brokers is
// EFFECTIVELY_KAFKA_BROKERS). Lists from the environment are comma-separated,
// durations are Go durations ("45s", "168h"). Per-topic settings (the topics:
// list) can only be given in the file.
//
// Only this package imports viper; the rest of the worker sees plain structs.
package config
