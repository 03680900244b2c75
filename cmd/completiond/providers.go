package main

import (
	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/provider/anthropic"
	"github.com/completiond/completiond/provider/openai"
	"github.com/completiond/completiond/service"
)

// factories build the real providers a configuration may name.
var factories = map[string]service.Factory{
	"anthropic": func(s service.ProviderSpec) (provider.Provider, error) {
		return anthropic.New(anthropic.Config{BaseURL: s.BaseURL, APIKey: s.APIKey})
	},
	"openai": func(s service.ProviderSpec) (provider.Provider, error) {
		return openai.New(openai.Config{BaseURL: s.BaseURL, APIKey: s.APIKey, PrefillBody: prefillBody(s)})
	},
}

// loadRoutes adds the configured upstream routes to cfg: those of the file
// at path when one is given, otherwise those of the API keys found in the
// environment. The sim routes stay available either way.
func loadRoutes(cfg service.Config, path string, getenv func(string) string) (service.Config, error) {
	if path != "" {
		return service.LoadFile(path, cfg, getenv, factories)
	}
	return service.EnvRoutes(cfg, getenv, factories)
}

// prefillBody is the spec's prefill body for openai.Config: an empty map,
// not nil, when the spec has none, so that the provider adds no default of
// its own — LoadFile has already decided.
func prefillBody(s service.ProviderSpec) map[string]any {
	if s.PrefillBody == nil {
		return map[string]any{}
	}
	return s.PrefillBody
}
