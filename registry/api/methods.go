package api

// RegisterAll adds every method of the API to s.
func (s *Server) RegisterAll() {
	s.registerTenants()
	s.registerTokens()
	s.registerProfiles()
	s.registerImages()
	s.registerSigners()
	s.registerSites()
	s.registerPools()
}
