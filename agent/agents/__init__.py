"""AidAI's five agents: summarization, planning, execution, reflection, conclusion. Each decides through the
Reasoner and acts through the check runner; none of them knows whether a host is real or simulated."""
