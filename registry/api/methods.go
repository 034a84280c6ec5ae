package api

// RegisterAll adds the methods of the API that need only the store; the others come
// with RegisterJoin, RegisterUserData, RegisterMetal (pools and nodes) and
// RegisterWorkflows.
func (s *Server) RegisterAll() {
	s.registerTenants()
	s.registerTokens()
	s.registerProfiles()
	s.registerImages()
	s.registerSigners()
	s.registerSites()
	s.registerEvents()
}
