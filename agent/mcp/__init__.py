"""`aidai mcp`: aidai's checks, diagnoses, tickets and knowledge as Model Context Protocol tools and resources, for
the on-call engineer's own assistant (stdio) or a shared server (streamable HTTP), on `aidai serve`'s runs."""
