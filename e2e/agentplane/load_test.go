package agentplane

func runAgentsChild() int { return 1 }
