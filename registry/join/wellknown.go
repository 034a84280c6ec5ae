package join

import (
	"encoding/json"
	"net/http"

	"github.com/better-compute/better-compute/proto/joinwire"
)

// wellKnown is the registry's well-known document.
func (s *Service) wellKnown() (joinwire.WellKnown, error) {
	signing, err := joinwire.SigningKeyPEM(s.keys.JoinSigningKey())
	if err != nil {
		return joinwire.WellKnown{}, err
	}
	return joinwire.WellKnown{
		Version:           joinwire.Version,
		ServingCA:         string(s.keys.ServingCAPEM),
		JoinSigningKey:    signing,
		JoinEncryptionKey: joinwire.NewJWK(s.keys.JoinEncryptionKey()),
		AgentEndpoint:     s.agentEndpoint,
		AgentEndpoints:    s.agentEndpoints,
	}, nil
}

// WellKnownHandler serves the well-known document as JSON, to anyone: it holds only
// public keys, and an agent trusts it only as far as its pins match.
func (s *Service) WellKnownHandler() (http.Handler, error) {
	doc, err := s.wellKnown()
	if err != nil {
		return nil, err
	}
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		w.Write(body)
	}), nil
}
