"""Offline knowledge for the agents: embeddings, the past-incident DB and the domain KB (Chroma via LlamaIndex)."""
